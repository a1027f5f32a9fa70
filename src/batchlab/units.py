"""Units shared by everything that prints or reads a time: batchlab computes in seconds and
speaks to users in milliseconds, as vLLM's flags and reports do."""

MS_PER_S = 1e3
