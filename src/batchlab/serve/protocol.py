"""The OpenAI wire protocol: request validation, error objects, response bodies and SSE chunks.

A request body is checked field by field before anything is queued; a bad one becomes an
`ApiError` whose object names the field, as OpenAI's and vLLM's do:
`{"error": {"message", "type": "invalid_request_error", "param": FIELD, "code"}}`.
Fields this server does not implement are refused when set to anything but their neutral
value (a request is never silently served differently from what it asked).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from batchlab.executor.sampling import SamplingParams
from batchlab.serve.tokenizer import CHAT_ROLES, chat_prompt, encode

DEFAULT_MAX_TOKENS = 16     # OpenAI's default for completions
MAX_SEED = 2 ** 63 - 1
MAX_N = 64                  # parallel samples of one prompt ('n')
# Set to anything but these, a field asks for something this server does not do.
NEUTRAL = {"best_of": (1,), "echo": (False,), "logprobs": (None, 0, False),
           "top_logprobs": (None, 0), "suffix": (None, ""), "stop": (None, [], ""),
           "stop_token_ids": (None, []), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
           "repetition_penalty": (None, 1), "logit_bias": (None, {}), "top_k": (None, -1, 0),
           "tools": (None, []), "response_format": (None,)}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind, self.code, self.headers = kind, code, headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def bad(param: str | None, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param, code=code)


@dataclass(frozen=True, slots=True)
class Limits:
    """What the served model accepts."""

    model: str           # the served model's name
    max_model_len: int   # prompt + outputs
    vocab: int
    eos: int


@dataclass(slots=True)
class Generation:
    """A checked request, ready for the engine."""

    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    seeded: bool          # False: the server picks the seed
    ignore_eos: bool
    stream: bool
    include_usage: bool
    return_token_ids: bool
    chat: bool
    n: int = 1            # parallel samples of the prompt, each a choice (sample k seeded seed + k)


# -- field readers: each names its field when the value is wrong ----------------------------------

def _int(body: dict, key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(key, f"'{key}' must be an integer, got {json.dumps(value)}", "invalid_type")
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise bad(key, f"'{key}' must be {bound}, got {value}")
    return value


def _number(body: dict, key: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(key, f"'{key}' must be a number, got {json.dumps(value)}", "invalid_type")
    if value < lo or value > hi or (lo_open and value == lo):
        raise bad(key, f"'{key}' must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value:g}")
    return float(value)


def _bool(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(key, f"'{key}' must be a boolean, got {json.dumps(value)}", "invalid_type")
    return value


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad("body", f"the body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise bad("body", "the body must be a JSON object", "invalid_type")
    return body


def _check_model(body: dict, limits: Limits) -> None:
    model = body.get("model")
    if model is None:
        return   # as vLLM: the one served model
    if not isinstance(model, str):
        raise bad("model", f"'model' must be a string, got {json.dumps(model)}", "invalid_type")
    if model != limits.model:
        raise bad("model", f"the model '{model}' does not exist; this server serves "
                           f"'{limits.model}'", "model_not_found")


def _check_unsupported(body: dict) -> None:
    for key, neutral in NEUTRAL.items():
        if key in body and body[key] not in neutral:
            raise bad(key, f"'{key}' = {json.dumps(body[key])} is not supported by this server "
                           f"(only {json.dumps(neutral[0])})", "unsupported")


def _token_ids(value: list, limits: Limits) -> list[int]:
    for i, t in enumerate(value):
        if isinstance(t, bool) or not isinstance(t, int):
            raise bad("prompt", f"'prompt' token {i} must be an integer id, got {json.dumps(t)}",
                      "invalid_type")
        if not 0 <= t < limits.vocab:
            raise bad("prompt", f"'prompt' token {i} = {t} is outside the vocabulary [0, {limits.vocab})")
    return list(value)


def _prompt(value: object, limits: Limits) -> list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]   # OpenAI's array of prompts, with its one prompt
    if isinstance(value, str):
        ids = encode(value)
    elif isinstance(value, list) and all(isinstance(v, (str, list)) for v in value) and value:
        raise bad("prompt", f"'prompt' holds {len(value)} prompts; this server takes one per request")
    elif isinstance(value, list):
        ids = _token_ids(value, limits)
    else:
        raise bad("prompt", "'prompt' must be a string or a list of token ids", "invalid_type")
    if not ids:
        raise bad("prompt", "'prompt' is empty")
    return ids


def _messages(value: object) -> list[int]:
    if not isinstance(value, list) or not value:
        raise bad("messages", "'messages' must be a non-empty list of {role, content} objects",
                  "invalid_type")
    turns = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            raise bad(f"messages[{i}].role", f"message {i}: 'role' must be one of "
                                             f"{', '.join(CHAT_ROLES)}")
        content = m.get("content")
        if isinstance(content, list):   # OpenAI's content parts: text parts only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise bad(f"messages[{i}].content", f"message {i}: only text content parts are supported")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad(f"messages[{i}].content", f"message {i}: 'content' must be a string", "invalid_type")
        turns.append((m["role"], content))
    return encode(chat_prompt(turns))


def parse_generation(body: dict, limits: Limits, chat: bool) -> Generation:
    """A completions (or chat completions) body -> a checked `Generation`; ApiError if bad."""
    _check_model(body, limits)
    _check_unsupported(body)
    prompt = _messages(body.get("messages")) if chat else _prompt(body.get("prompt"), limits)
    room = limits.max_model_len - len(prompt)
    if room < 1:
        raise bad("messages" if chat else "prompt",
                  f"the prompt has {len(prompt)} tokens; the model's context is "
                  f"{limits.max_model_len}, which leaves no room for an output", "context_length_exceeded")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _int(body, key, DEFAULT_MAX_TOKENS, 1)
    if len(prompt) + max_tokens > limits.max_model_len:
        raise bad(key, f"'{key}' = {max_tokens} with a prompt of {len(prompt)} tokens exceeds the "
                       f"model's context of {limits.max_model_len} (at most {room})",
                  "context_length_exceeded")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise bad("stream_options", "'stream_options' is allowed only with 'stream': true")
    if options is not None and not isinstance(options, dict):
        raise bad("stream_options", "'stream_options' must be an object", "invalid_type")
    include_usage = _bool(options or {}, "include_usage", False)
    seed = _int(body, "seed", None, 0, MAX_SEED)
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 1.0, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=seed or 0,
        min_tokens=_int(body, "min_tokens", 0, 0, max_tokens),
        stop_token=limits.eos)
    return Generation(prompt=prompt, max_tokens=max_tokens, sampling=sampling, seeded=seed is not None,
                      ignore_eos=_bool(body, "ignore_eos", False), stream=stream,
                      include_usage=include_usage,
                      return_token_ids=_bool(body, "return_token_ids", False), chat=chat,
                      n=_int(body, "n", 1, 1, MAX_N))


# -- responses -------------------------------------------------------------------------------

def usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class ChunkWriter:
    """The server-sent events of one streamed request, one per token.

    Everything but the token's text, finish reason and id is the same in every chunk of a
    request, so it is serialised once: the event loop's work per token is one `json.dumps` of
    a short string (this is the server's hot path at thousands of tokens per second).
    """

    __slots__ = ("head", "first_head", "close", "with_ids")

    def __init__(self, rid: str, created: int, model: str, chat: bool, with_ids: bool,
                 index: int = 0) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"
        common = (f'data: {{"id":{json.dumps(rid)},"object":"{obj}","created":{created},'
                  f'"model":{json.dumps(model)},"choices":[{{"index":{index},')
        if chat:   # the first delta also names the role, as OpenAI's does
            self.first_head = common + '"delta":{"role":"assistant","content":'
            self.head = common + '"delta":{"content":'
            self.close = "}"
        else:
            self.first_head = self.head = common + '"text":'
            self.close = ""
        self.with_ids = with_ids

    def __call__(self, text: str, finish: str | None, first: bool, token: int) -> str:
        reason = "null" if finish is None else f'"{finish}"'
        ids = f',"token_ids":[{token}]' if self.with_ids else ""
        return (f'{self.first_head if first else self.head}{json.dumps(text)}{self.close},'
                f'"logprobs":null,"finish_reason":{reason}{ids}}}]}}\n\n')


def usage_chunk(rid: str, created: int, model: str, chat: bool, prompt: int, completion: int) -> str:
    obj = "chat.completion.chunk" if chat else "text_completion"
    return event({"id": rid, "object": obj, "created": created, "model": model, "choices": [],
                  "usage": usage(prompt, completion)})


def event(data: dict) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


DONE = "data: [DONE]\n\n"


def completion(rid: str, created: int, model: str, chat: bool, text: str, finish: str,
               prompt: int, tokens: list[int], with_ids: bool) -> dict:
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    if with_ids:
        choice["token_ids"] = tokens
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
            "usage": usage(prompt, len(tokens))}
