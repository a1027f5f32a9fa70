"""The OpenAI wire protocol: request validation, error objects, response bodies and SSE chunks.

A request body is checked field by field before anything is queued; a bad one becomes an
`ApiError` whose object names the field, as OpenAI's and vLLM's do:
`{"error": {"message", "type": "invalid_request_error", "param": FIELD, "code"}}`.
Fields this server does not implement are refused when set to anything but their neutral
value (a request is never silently served differently from what it asked). Fields that need
the model's logits (`executor.sampling.LOGIT_FIELDS`) are recorded in `Generation.needs`, so
a server whose executor has no logits refuses them by name.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from batchlab.executor.sampling import SamplingParams
from batchlab.serve.tokenizer import CHAT_ROLES, chat_prompt, encode

DEFAULT_MAX_TOKENS = 16     # OpenAI's default for completions (chat: the rest of the context)
MAX_SEED = 2 ** 63 - 1
MAX_N = 64                  # parallel samples of one prompt ('n')
MAX_LOGPROBS = 20           # vLLM's default --max-logprobs
MAX_STOPS = 16              # stop strings (and stop token ids) per request
MAX_STOP_BYTES = 256        # the longest stop string, in UTF-8 bytes
# Set to anything but these, a field asks for something this server does not do.
NEUTRAL = {"best_of": (None, 1), "suffix": (None, ""), "tools": (None, []), "response_format": (None,),
           # vLLM's own fields this server does not implement
           "prompt_logprobs": (None,), "min_p": (None, 0), "use_beam_search": (None, False),
           "allowed_token_ids": (None,), "bad_words": (None, []), "truncate_prompt_tokens": (None,),
           "guided_json": (None,), "guided_regex": (None,), "guided_choice": (None,),
           "guided_grammar": (None,), "structured_outputs": (None,)}
CHAT_NEUTRAL = {"echo": (None, False)}   # vLLM's chat echo (of the last message) is not served
# Only an escape in \ud800-\udfff can make a string that is not text (raw UTF-8 cannot).
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def not_found(model: str) -> ApiError:
    """vLLM's answer to a model it does not serve: 404, NotFoundError, the status as the code."""
    return ApiError(404, f"The model `{model}` does not exist.", "model", kind="NotFoundError", code=404)


def _show(value: object, limit: int = 60) -> str:
    """A value quoted in an error message: JSON, cut short (a body may be a megabyte deep)."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."


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
    max_tokens_given: bool = True        # False: the default (chat: the rest of the context)
    logprobs: int | None = None          # top logprobs per token (0: the sampled token's only)
    echo: bool = False                   # completions: the prompt leads the text
    stop: tuple[bytes, ...] = ()         # stop strings, as UTF-8 bytes (the tokenizer's units)
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    needs: frozenset = field(default_factory=frozenset)   # LOGIT_FIELDS this request asks for


# -- field readers: each names its field when the value is wrong ----------------------------------

def _int(body: dict, key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(key, f"'{key}' must be an integer, got {_show(value)}", "invalid_type")
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise bad(key, f"'{key}' must be {bound}, got {value}")
    return value


def _number(body: dict, key: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(key, f"'{key}' must be a number, got {_show(value)}", "invalid_type")
    if value < lo or value > hi or (lo_open and value == lo):
        raise bad(key, f"'{key}' must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value:g}")
    return float(value)


def _bool(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(key, f"'{key}' must be a boolean, got {_show(value)}", "invalid_type")
    return value


read_bool = _bool   # for the other routes' fields


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except RecursionError:
        raise bad("body", "the body nests arrays or objects too deeply to be a request",
                  "invalid_json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad("body", f"the body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise bad("body", "the body must be a JSON object", "invalid_type")
    if _SURROGATE_ESCAPE.search(raw):
        where = _lone_surrogate(body)
        if where is not None:
            raise bad(where, f"'{where}' holds a lone UTF-16 surrogate escape (\\ud800-\\udfff "
                             "without its pair), which is not text")
    return body


def _lone_surrogate(body: dict) -> str | None:
    """The path of the first key or string holding a lone surrogate, or None (no recursion:
    a body may nest as deep as the JSON parser allows)."""
    stack: list[tuple[str, object]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path or "body"
        elif isinstance(value, dict):
            for key, item in value.items():
                lone = _SURROGATE.search(key)
                key = key.encode("utf-8", "backslashreplace").decode("utf-8")   # printable
                where = f"{path}.{key}" if path else key
                if lone:
                    return where
                stack.append((where, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
    return None


def check_model(body: dict, limits: Limits) -> None:
    model = body.get("model")
    if model is None:
        return   # as vLLM: the one served model
    if not isinstance(model, str):
        raise bad("model", f"'model' must be a string, got {_show(model)}", "invalid_type")
    if model != limits.model:
        raise not_found(model)


def _check_unsupported(body: dict, chat: bool) -> None:
    for key, neutral in (NEUTRAL | CHAT_NEUTRAL).items() if chat else NEUTRAL.items():
        if key in body and body[key] not in neutral:
            raise bad(key, f"'{key}' = {_show(body[key])} is not supported by this server "
                           f"(only {json.dumps(neutral[0])})", "unsupported")


def all_ints(value: list) -> bool:
    """Whether every item is an int (not a bool): one pass over the item types in C, since a
    prompt of thousands of ids is read on every request's way to the engine."""
    return set(map(type, value)) <= {int}


def _token_ids(value: list, limits: Limits) -> list[int]:
    if all_ints(value) and (not value or (min(value) >= 0 and max(value) < limits.vocab)):
        return list(value)
    for i, t in enumerate(value):   # the first bad id, for its message
        if isinstance(t, bool) or not isinstance(t, int):
            raise bad("prompt", f"'prompt' token {i} must be an integer id, got {_show(t)}",
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


def chat_tokens(value: object) -> list[int]:
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


def _stops(body: dict) -> tuple[bytes, ...]:
    value = body.get("stop")
    if value is None or value == "":
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or len(items) > MAX_STOPS:
        raise bad("stop", f"'stop' must be a string or a list of at most {MAX_STOPS} strings",
                  "invalid_type")
    out = []
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s:
            raise bad(f"stop[{i}]", f"'stop' item {i} must be a non-empty string, got {_show(s)}",
                      "invalid_type")
        data = s.encode("utf-8")
        if len(data) > MAX_STOP_BYTES:
            raise bad(f"stop[{i}]", f"'stop' item {i} is {len(data)} bytes long; at most {MAX_STOP_BYTES}")
        out.append(data)
    return tuple(out)


def _stop_token_ids(body: dict, limits: Limits) -> tuple[int, ...]:
    value = body.get("stop_token_ids")
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_STOPS:
        raise bad("stop_token_ids", f"'stop_token_ids' must be a list of at most {MAX_STOPS} token ids",
                  "invalid_type")
    for i, t in enumerate(value):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < limits.vocab:
            raise bad(f"stop_token_ids[{i}]", f"'stop_token_ids' item {i} must be a token id in "
                                              f"[0, {limits.vocab}), got {_show(t)}")
    return tuple(value)


def _logit_bias(body: dict, limits: Limits) -> tuple[tuple[int, float], ...]:
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise bad("logit_bias", "'logit_bias' must be an object of token id -> bias", "invalid_type")
    out = []
    for key, bias in value.items():
        if not (key.isascii() and key.isdigit()) or not 0 <= int(key) < limits.vocab:   # JSON keys are strings
            raise bad("logit_bias", f"'logit_bias' key {_show(key)} is not a token id in [0, {limits.vocab})")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise bad("logit_bias", f"'logit_bias' for token {key} must be a number in [-100, 100], "
                                    f"got {_show(bias)}")
        out.append((int(key), float(bias)))
    return tuple(sorted(out))


def _logprobs(body: dict, chat: bool) -> tuple[int | None, list[str]]:
    """How many top logprobs per token (None: no logprobs), and the fields that asked."""
    if chat:   # OpenAI's chat: logprobs is a switch, top_logprobs the count
        on = _bool(body, "logprobs", False)
        top = _int(body, "top_logprobs", None, 0, MAX_LOGPROBS)
        if top is not None and not on and top:
            raise bad("top_logprobs", "'top_logprobs' needs 'logprobs': true")
        return ((top or 0) if on else None), [k for k in ("logprobs", "top_logprobs")
                                            if on and body.get(k) not in (None, False, 0)]
    value = body.get("logprobs")
    if isinstance(value, bool):   # the completions field is a count, never a switch
        raise bad("logprobs", f"'logprobs' must be an integer, got {_show(value)}", "invalid_type")
    n = _int(body, "logprobs", None, 0, MAX_LOGPROBS)
    return n, ([] if n is None else ["logprobs"])


def parse_generation(body: dict, limits: Limits, chat: bool) -> Generation:
    """A completions (or chat completions) body -> a checked `Generation`; ApiError if bad."""
    check_model(body, limits)
    _check_unsupported(body, chat)
    prompt = chat_tokens(body.get("messages")) if chat else _prompt(body.get("prompt"), limits)
    room = limits.max_model_len - len(prompt)
    if room < 1:
        raise bad("messages" if chat else "prompt",
                  f"the prompt has {len(prompt)} tokens; the model's context is "
                  f"{limits.max_model_len}, which leaves no room for an output", "context_length_exceeded")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    given = body.get(key) is not None
    # vLLM's defaults: 16 for completions, the rest of the context for chat
    max_tokens = _int(body, key, room if chat else min(DEFAULT_MAX_TOKENS, room), 1)
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
    logprobs, needs = _logprobs(body, chat)
    echo = not chat and _bool(body, "echo", False)
    if echo and logprobs is not None:
        needs.append("echo")   # the prompt's own logprobs
    top_k = _int(body, "top_k", 0, -1)
    penalties = {k: _number(body, k, 0.0, -2.0, 2.0) for k in ("presence_penalty", "frequency_penalty")}
    repetition = _number(body, "repetition_penalty", 1.0, 0.0, 2.0, lo_open=True)
    bias = _logit_bias(body, limits)
    asked = {"top_k": top_k > 0, "repetition_penalty": repetition != 1.0, "logit_bias": bool(bias),
             **{k: v != 0 for k, v in penalties.items()}}
    needs += [k for k, on in asked.items() if on]
    stop_ids = _stop_token_ids(body, limits)
    min_tokens = _int(body, "min_tokens", 0, 0, max_tokens)
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 1.0, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=seed or 0,
        min_tokens=min_tokens,
        stop_token=limits.eos,
        stop_token_ids=stop_ids,
        top_k=max(top_k, 0),
        presence_penalty=penalties["presence_penalty"],
        frequency_penalty=penalties["frequency_penalty"],
        repetition_penalty=repetition,
        logit_bias=bias,
        logprobs=logprobs)
    return Generation(prompt=prompt, max_tokens=max_tokens, sampling=sampling, seeded=seed is not None,
                      ignore_eos=_bool(body, "ignore_eos", False), stream=stream,
                      include_usage=include_usage,
                      return_token_ids=_bool(body, "return_token_ids", False), chat=chat,
                      n=_int(body, "n", 1, 1, MAX_N), max_tokens_given=given, logprobs=logprobs,
                      echo=echo, stop=_stops(body), stop_token_ids=stop_ids,
                      include_stop_str_in_output=_bool(body, "include_stop_str_in_output", False),
                      min_tokens=min_tokens, needs=frozenset(needs))


# -- responses -------------------------------------------------------------------------------

def usage(prompt: int, completion: int, cached: int = 0) -> dict:
    """OpenAI's usage, with the prompt tokens a prefix cache held (vLLM's `cached_tokens`)."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


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

    def __call__(self, text: str, finish: str | None, first: bool, token: int,
                 logprobs: str = "null", stop_reason: str | int | None = None) -> str:
        reason = "null" if finish is None else f'"{finish}"'
        if stop_reason is not None:   # vLLM's: the stop string or token id that ended it
            reason += f',"stop_reason":{json.dumps(stop_reason)}'
        ids = f',"token_ids":[{token}]' if self.with_ids else ""
        return (f'{self.first_head if first else self.head}{json.dumps(text)}{self.close},'
                f'"logprobs":{logprobs},"finish_reason":{reason}{ids}}}]}}\n\n')


def usage_chunk(rid: str, created: int, model: str, chat: bool, prompt: int, completion: int,
                cached: int = 0) -> str:
    obj = "chat.completion.chunk" if chat else "text_completion"
    return event({"id": rid, "object": obj, "created": created, "model": model, "choices": [],
                  "usage": usage(prompt, completion, cached)})


def event(data: dict) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


DONE = "data: [DONE]\n\n"


def choice(chat: bool, index: int, text: str, finish: str, logprobs: dict | None,
           stop_reason: str | int | None, tokens: list[int] | None) -> dict:
    """One choice of a non-streamed response (`tokens`: its ids, when the request asked)."""
    if chat:
        out = {"index": index, "message": {"role": "assistant", "content": text}}
    else:
        out = {"index": index, "text": text}
    out |= {"logprobs": logprobs, "finish_reason": finish, "stop_reason": stop_reason}
    if tokens is not None:
        out["token_ids"] = tokens
    return out


def response(rid: str, created: int, model: str, chat: bool, choices: list[dict], usage_: dict) -> dict:
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model, "choices": choices, "usage": usage_}
