"""`batchlab serve`: the mini transformer on the engine, behind an OpenAI-compatible HTTP API."""
