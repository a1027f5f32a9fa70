"""Before the clock starts: is the server there, and which model does it serve?

One `GET /v1/models`, as vLLM's benchmark does to find a model when none is given. A server
that cannot be reached fails the whole run at once with one line naming `--base-url`, instead
of a thousand identical per-request errors. With `--model` given, a server without
`/v1/models` (it answered, just not 200) is fine.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from batchlab.errors import InputError

# Bytes of GET /v1/models read: a listing of a few models is a few hundred.
LISTING_LIMIT = 1024 * 1024
# Characters of a model name: it goes into every request body and the result file's name.
MODEL_NAME_LIMIT = 200


async def first_model(base_url: str, model: str | None, timeout_s: float) -> str:
    """`model` if given, else the first model the server lists."""
    url = f"{base_url}/v1/models"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
            status = response.status
            body = await response.content.read(LISTING_LIMIT + 1) if status == 200 else b""
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        # ValueError: what aiohttp raises for a URL it cannot use (a port past 65535, a bad host).
        reason = f"no answer within {timeout_s:g} s" if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__
        raise InputError(f"field '--base-url': cannot reach the server at {base_url}: {reason[:200]}") from None
    if model:
        return model
    listing = None
    if len(body) <= LISTING_LIMIT:
        try:
            listing = json.loads(body)
        except (ValueError, RecursionError):   # not JSON, or nested past the parser's depth
            listing = None
    data = listing.get("data") if isinstance(listing, dict) else None
    if status != 200 or not isinstance(data, list) or not data or not isinstance(data[0], dict) \
            or not isinstance(data[0].get("id"), str) or not 0 < len(data[0]["id"].strip()) <= MODEL_NAME_LIMIT \
            or not data[0]["id"].isprintable():
        raise InputError(f"field '--model' is not given and {url} lists no model (HTTP {status}); pass --model")
    return data[0]["id"]
