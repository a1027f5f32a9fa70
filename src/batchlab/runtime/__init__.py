"""The process's runtime: the allocator's thresholds, garbage-collector pauses, lazy imports and
the event loop."""
