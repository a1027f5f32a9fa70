"""Before the clock starts: is the server there, and which model does it serve?

One `GET /v1/models`, as vLLM's benchmark does to find a model when none is given. A server
that cannot be reached fails the whole run at once with one line naming `--base-url`, instead
of a thousand identical per-request errors. With `--model` given, a server without
`/v1/models` (it answered, just not 200) is fine.
"""

from __future__ import annotations

import asyncio

import aiohttp

from batchlab.errors import InputError


async def first_model(base_url: str, model: str | None, timeout_s: float) -> str:
    """`model` if given, else the first model the server lists."""
    url = f"{base_url}/v1/models"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
            status = response.status
            listing = await response.json(content_type=None) if status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        reason = f"no answer within {timeout_s:g} s" if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__
        raise InputError(f"field '--base-url': cannot reach the server at {base_url}: {reason}") from exc
    except ValueError as exc:  # 200 but not JSON
        if model:
            return model
        raise InputError(f"field '--model' is not given and {url} did not answer JSON; pass --model") from exc
    if model:
        return model
    data = listing.get("data") if isinstance(listing, dict) else None
    if status != 200 or not data or not isinstance(data[0], dict) or "id" not in data[0]:
        raise InputError(f"field '--model' is not given and {url} lists no model (HTTP {status}); pass --model")
    return str(data[0]["id"])
