"""Property-based requests over the OpenAPI schema (schemathesis): no route answers 5xx to any input.

Bounded: ``MAX_EXAMPLES`` generated requests per operation (positive and negative data), against the real
app on loopback. Driven through hypothesis directly (schemathesis' pytest plugin is not needed).
"""

from __future__ import annotations

from typing import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode
from service_fixtures import KEYS

from ragbudget.service.app import BackgroundServer, create_app

AUTH = {"Authorization": f"Bearer {KEYS['acme']}"}
MAX_EXAMPLES = 10


@pytest.fixture(scope="module")
def schema_server(cranfield_rag, service_config, tmp_path_factory) -> Iterator[BackgroundServer]:  # noqa: F811
    # an empty document root: generated ingest paths can never add documents to the shared index
    cfg = service_config.with_overrides({"service.document_root": str(tmp_path_factory.mktemp("emptyroot")),
                                         "service.batch_dir": str(tmp_path_factory.mktemp("schema-batches")),
                                         "service.tenants": [t.model_dump() | {"requests_per_s": 1e6,
                                                                               "burst": 10**6}
                                                             for t in service_config.service.tenants]})
    with BackgroundServer(create_app(cranfield_rag, cfg)) as srv:
        yield srv


def test_openapi_lists_every_route(schema_server):
    schema = schemathesis.openapi.from_url(schema_server.url + "/openapi.json")
    labels = {op.ok().label for op in schema.get_all_operations()}
    for label in ("POST /v1/query", "POST /v1/chat/completions", "POST /v1/ingest", "POST /v1/batches",
                  "GET /v1/indexes", "GET /metrics"):
        assert label in labels


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors(schema_server, mode):
    schema = schemathesis.openapi.from_url(schema_server.url + "/openapi.json")
    failures: list[str] = []
    calls = 0
    for result in schema.get_all_operations():
        op = result.ok()

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            nonlocal calls
            calls += 1
            resp = case.call(headers=AUTH, timeout=60)
            if resp.status_code >= 500:
                failures.append(f"{op.label} → {resp.status_code}: {resp.text[:300]}")
            elif resp.status_code >= 400:  # every refusal is the JSON error shape
                keys = set(resp.json()["error"])  # "param" too when one parameter is at fault (OpenAI's shape)
                assert {"type", "message", "fix"} <= keys <= {"type", "message", "fix", "param"}, resp.text[:300]

        try:
            check()
        except Unsatisfiable:  # nothing to negate (e.g. GET /healthz has no inputs)
            assert mode == GenerationMode.NEGATIVE
    assert calls > 0
    assert not failures, "\n".join(failures[:10])
