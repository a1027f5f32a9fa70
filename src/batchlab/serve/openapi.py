"""The server's OpenAPI 3.1 schema, written as data: every route, every request field the
server reads (with the bounds it checks), every status it answers and each response's shape, so
schema-driven clients and fuzzers (schemathesis) can drive it. Served at GET /openapi.json.
"""

from __future__ import annotations

from batchlab.serve import served_log
from batchlab.serve.protocol import MAX_LOGPROBS, MAX_N, MAX_SEED, MAX_STOPS, Limits

NULL = {"type": "null"}
# One server-sent event (OpenAPI before 3.2 has a stream's `schema` describe each event): its
# `data` is a chunk or an error object as JSON, or `[DONE]` at the end.
SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}}}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, NULL]}


ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "integer", "null"]}}}}}

USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"], "properties": {
    "prompt_tokens": {"type": "integer", "minimum": 0}, "completion_tokens": {"type": "integer", "minimum": 0},
    "total_tokens": {"type": "integer", "minimum": 0},
    "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": {"type": "integer", "minimum": 0}}}}}

COMPLETION_LOGPROBS = {"type": "object", "required": ["text_offset", "token_logprobs", "tokens", "top_logprobs"],
                       "properties": {
                           "text_offset": {"type": "array", "items": {"type": "integer"}},
                           "token_logprobs": {"type": "array", "items": {"type": ["number", "null"]}},
                           "tokens": {"type": "array", "items": {"type": "string"}},
                           "top_logprobs": {"type": "array", "items": _nullable(
                               {"type": "object", "additionalProperties": {"type": "number"}})}}}

_LOGPROB = {"type": "object", "required": ["token", "logprob", "bytes"], "properties": {
    "token": {"type": "string"}, "logprob": {"type": "number"},
    "bytes": {"type": "array", "items": {"type": "integer"}}}}
CHAT_LOGPROBS = {"type": "object", "required": ["content"], "properties": {"content": {
    "type": "array", "items": {**_LOGPROB, "properties": {
        **_LOGPROB["properties"], "top_logprobs": {"type": "array", "items": _LOGPROB}}}}}}

_FINISH = {"type": ["string", "null"], "enum": ["stop", "length", None]}
_CHOICE_COMMON = {"index": {"type": "integer", "minimum": 0}, "finish_reason": _FINISH,
                  "stop_reason": {"type": ["string", "integer", "null"]},
                  "token_ids": {"type": "array", "items": {"type": "integer"}}}


def _response(chat: bool) -> dict:
    if chat:
        choice = {"type": "object", "required": ["index", "message", "finish_reason"], "properties": {
            **_CHOICE_COMMON, "logprobs": _nullable(CHAT_LOGPROBS),
            "message": {"type": "object", "required": ["role", "content"], "properties": {
                "role": {"const": "assistant"}, "content": {"type": "string"}}}}}
    else:
        choice = {"type": "object", "required": ["index", "text", "finish_reason"], "properties": {
            **_CHOICE_COMMON, "logprobs": _nullable(COMPLETION_LOGPROBS), "text": {"type": "string"}}}
    return {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"], "properties": {
        "id": {"type": "string"}, "object": {"const": "chat.completion" if chat else "text_completion"},
        "created": {"type": "integer"}, "model": {"type": "string"},
        "choices": {"type": "array", "minItems": 1, "items": choice}, "usage": USAGE}}


def _sampling(limits: Limits) -> dict:
    """The fields both generation routes read, with the bounds `protocol` checks."""
    token = {"type": "integer", "minimum": 0, "maximum": limits.vocab - 1}
    fields = {
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": limits.max_model_len},
        "temperature": {"type": "number", "minimum": 0, "maximum": 100},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": -1},
        "n": {"type": "integer", "minimum": 1, "maximum": MAX_N},
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "stop": {"anyOf": [{"type": "string"}, {"type": "array", "maxItems": MAX_STOPS,
                                                "items": {"type": "string", "minLength": 1}}, NULL]},
        "stop_token_ids": {"type": "array", "maxItems": MAX_STOPS, "items": token},
        "include_stop_str_in_output": {"type": "boolean"},
        "min_tokens": {"type": "integer", "minimum": 0},
        "ignore_eos": {"type": "boolean"},
        "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "repetition_penalty": {"type": "number", "exclusiveMinimum": 0, "maximum": 2},
        "logit_bias": {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"},
                       "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
        "return_token_ids": {"type": "boolean"},
    }
    # null is the field's default, as the server reads it
    return {"model": {"type": "string", "enum": [limits.model]},
            **{k: v if v.get("anyOf", [None])[-1] == NULL else _nullable(v) for k, v in fields.items()}}


def _json(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict:
    words = {400: "a field is wrong (the error names it)", 404: "the model is not served",
             413: "the body is too large", 429: "the waiting queue is full (see Retry-After)",
             503: "the server is draining or its engine failed (see Retry-After)"}
    return {str(s): {"description": words[s], **_json({"$ref": "#/components/schemas/Error"})} for s in statuses}


def _generation(chat: bool, limits: Limits) -> dict:
    token = {"type": "integer", "minimum": 0, "maximum": limits.vocab - 1}
    fields = _sampling(limits)
    if chat:
        part = {"type": "object", "required": ["type", "text"],
                "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
        fields |= {
            "messages": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["role", "content"], "properties": {
                    "role": {"enum": ["system", "user", "assistant"]},
                    "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": part}]}}}},
            "max_completion_tokens": fields["max_tokens"],
            "logprobs": _nullable({"type": "boolean"}),
            "top_logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": MAX_LOGPROBS})}
        required = ["messages"]
    else:
        fields |= {
            "prompt": {"anyOf": [{"type": "string", "minLength": 1},
                                 {"type": "array", "minItems": 1, "items": token},
                                 {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "string"}}]},
            "logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": MAX_LOGPROBS}),
            "echo": _nullable({"type": "boolean"})}
        required = ["prompt"]
    name = "ChatCompletion" if chat else "Completion"
    return {"post": {
        "summary": "Chat completion" if chat else "Completion",
        "requestBody": {"required": True, **_json({"type": "object", "required": required, "properties": fields})},
        "responses": {"200": {"description": "the response, or with stream: server-sent events", "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}},
            "text/event-stream": {"schema": SSE_EVENT}}},
            **_errors(400, 404, 413, 429, 503)}}}


def schema(limits: Limits) -> dict:
    from batchlab import __version__

    plain = {"content": {"text/plain": {"schema": {"type": "string"}}}}
    model_ref = {"type": "string", "enum": [limits.model]}
    return {
        "openapi": "3.1.0",
        "info": {"title": "batchlab serve", "version": __version__,
                 "description": "An OpenAI-compatible server of the numpy mini transformer (docs/serving.md)."},
        "paths": {
            "/v1/completions": _generation(False, limits),
            "/v1/chat/completions": _generation(True, limits),
            "/v1/models": {"get": {"summary": "The served model", "responses": {"200": {
                "description": "one model", **_json({"type": "object", "required": ["object", "data"],
                                                     "properties": {"object": {"const": "list"}, "data": {
                                                         "type": "array", "items": {
                                                             "type": "object", "required": ["id", "object"],
                                                             "properties": {"id": {"type": "string"},
                                                                            "object": {"const": "model"},
                                                                            "max_model_len": {"type": "integer"}}}}}})}}}},
            "/health": {"get": {"summary": "ok, draining or failed", "responses": {
                status: {"description": word, **_json({"type": "object", "required": ["status"], "properties": {
                    "status": {"enum": ["ok", "draining", "failed"]}, "running": {"type": "integer"},
                    "waiting": {"type": "integer"}, "error": {"type": "string"}}})}
                for status, word in (("200", "serving"), ("503", "draining or failed"))}}},
            "/metrics": {"get": {"summary": "Prometheus metrics (vLLM's names)",
                                 "responses": {"200": {"description": "the exposition text", **plain}}}},
            "/version": {"get": {"summary": "The server's version", "responses": {"200": {
                "description": "version", **_json({"type": "object", "required": ["version"],
                                                   "properties": {"version": {"type": "string"}}})}}}},
            "/ping": {op: {"summary": "200 while serving", "responses": {
                "200": {"description": "serving"}, "503": {"description": "draining or failed"}}}
                for op in ("get", "post")},
            "/tokenize": {"post": {"summary": "Text or chat messages to token ids", "requestBody": {
                "required": True, **_json({"type": "object", "oneOf": [{"required": ["prompt"]},
                                                                      {"required": ["messages"]}], "properties": {
                    "model": model_ref, "prompt": {"type": "string"},
                    "messages": _generation(True, limits)["post"]["requestBody"]["content"]["application/json"][
                        "schema"]["properties"]["messages"],
                    "return_token_strs": _nullable({"type": "boolean"})}})},
                "responses": {"200": {"description": "the tokens", **_json({
                    "type": "object", "required": ["count", "max_model_len", "tokens", "token_strs"], "properties": {
                        "count": {"type": "integer"}, "max_model_len": {"type": "integer"},
                        "tokens": {"type": "array", "items": {"type": "integer"}},
                        "token_strs": _nullable({"type": "array", "items": {"type": "string"}})}})},
                    **_errors(400, 404, 413)}}},
            "/detokenize": {"post": {"summary": "Token ids to text", "requestBody": {
                "required": True, **_json({"type": "object", "required": ["tokens"], "properties": {
                    "model": model_ref, "tokens": {"type": "array", "items": {
                        "type": "integer", "minimum": 0, "maximum": limits.vocab - 1}}}})},
                "responses": {"200": {"description": "the text", **_json({
                    "type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}})},
                    **_errors(400, 404, 413)}}},
            "/openapi.json": {"get": {"summary": "This schema", "responses": {"200": {
                "description": "OpenAPI 3.1", **_json({"type": "object"})}}}},
            **served_log.paths(_errors(400)),
        },
        "components": {"schemas": {"Error": ERROR, "Completion": _response(False),
                                   "ChatCompletion": _response(True)}},
    }
