"""The traces shipped in src/batchlab/data/ (credit in data/README.md), by workload name.

Apart from their readers so that listing or checking a workload name loads neither the trace
parsers nor their record types.
"""

BUILTIN_TRACES = {"azure-conv": "AzureLLMInferenceTrace_conv.csv.gz"}
BUILTIN_MOONCAKE = {
    "mooncake-conv": "mooncake_conversation_trace.jsonl.gz",
    "mooncake-synthetic": "mooncake_synthetic_trace.jsonl.gz",
}
