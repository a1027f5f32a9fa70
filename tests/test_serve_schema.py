"""Schema-driven fuzzing of `batchlab serve`: schemathesis generates requests from the server's
own /openapi.json, valid ones and ones that break it, and checks every answer: no 5xx, a
documented status and content type, and a body that matches the schema. Bounded in examples so
it stays quick."""

from __future__ import annotations

import pytest
import schemathesis
from schemathesis import GenerationMode
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from batchlab.serve.launch import ServeProcess

from helpers import ROOT

EXAMPLES = 150   # over every operation; each generation request is at most 64 tokens of the tiny model
NEGATIVE_EXAMPLES = 100   # bodies that break the schema: each is refused before any work
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def url():
    s = ServeProcess("--model", "tiny", "--max-model-len", "64", "--kv-cache-tokens", "2048",
                     "--check-memory", cwd=ROOT)
    yield s.url
    assert s.stop() == 0


def _fuzz(url: str, mode: GenerationMode, examples: int) -> set[tuple[str, int]]:
    """(path, status) of every answer to `examples` generated requests, each checked."""
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    seen: set[tuple[str, int]] = set()

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(generation_mode=mode))
    def fuzz(case):
        response = case.call(base_url=url, timeout=30)
        case.validate_response(response, checks=CHECKS)
        seen.add((case.operation.path, response.status_code))

    fuzz()
    return seen


def test_fuzzing_from_the_openapi_schema_finds_no_5xx_and_no_response_off_the_schema(url):
    seen = _fuzz(url, GenerationMode.POSITIVE, EXAMPLES)
    paths = {path for path, _ in seen}
    assert {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize",
            "/debug/batchlab/steps", "/debug/batchlab/requests"} <= paths
    assert ("/v1/completions", 200) in seen and ("/v1/chat/completions", 200) in seen


def test_bodies_that_break_the_schema_get_error_objects_never_a_5xx(url):
    seen = _fuzz(url, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)
    assert ("/v1/completions", 400) in seen and ("/v1/chat/completions", 400) in seen
    assert ("/debug/batchlab/steps", 400) in seen and ("/debug/batchlab/requests", 400) in seen
    assert all(400 <= status < 500 for _, status in seen), sorted(seen)
