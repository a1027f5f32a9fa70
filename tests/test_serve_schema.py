"""Schema-driven fuzzing of `batchlab serve`: schemathesis generates requests from the server's
own /openapi.json and checks every answer: no 5xx, a documented status and content type, and a
body that matches the schema. Bounded in examples so it stays quick."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from batchlab.serve.launch import ServeProcess

from conftest import ROOT

EXAMPLES = 150   # over every operation; each generation request is at most 64 tokens of the tiny model
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def url():
    s = ServeProcess("--model", "tiny", "--max-model-len", "64", "--kv-cache-tokens", "2048",
                     "--check-memory", cwd=ROOT)
    yield s.url
    assert s.stop() == 0


def test_fuzzing_from_the_openapi_schema_finds_no_5xx_and_no_response_off_the_schema(url):
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    seen: set[tuple[str, int]] = set()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy())
    def fuzz(case):
        response = case.call(base_url=url, timeout=30)
        case.validate_response(response, checks=CHECKS)
        seen.add((case.operation.path, response.status_code))

    fuzz()
    paths = {path for path, _ in seen}
    assert {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"} <= paths
    assert ("/v1/completions", 200) in seen and ("/v1/chat/completions", 200) in seen
