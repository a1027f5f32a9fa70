"""`batchlab serve`'s defaults, apart from the server: the CLI shows them in --help without
loading the server's logging, sockets and HTTP stack."""

DEFAULT_MODEL = "mini"
DEFAULT_KV_CACHE_TOKENS = 65536
DEFAULT_MAX_WAITING = 1024
DEFAULT_SYSTEM = "paged:max_bs=64"
DEFAULT_DRAIN_S = 60.0
# uvicorn's HTTP implementation, vLLM's (uvicorn[standard]): its C parser and chunked writes
# take less of the server's CPU per streamed token than h11 (docs/performance.md)
HTTP = "httptools"
