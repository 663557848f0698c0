"""Property-based requests over the OpenAPI schema (schemathesis): no route answers 5xx to any input.

Bounded: a few dozen generated requests per operation, against the real app on loopback.
"""

from __future__ import annotations

from typing import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from service_fixtures import KEYS, cranfield_rag, docs_root, service_config  # noqa: F401

from ragbudget.service.app import BackgroundServer, create_app

AUTH = {"Authorization": f"Bearer {KEYS['acme']}"}


@pytest.fixture(scope="module")
def schema_server(cranfield_rag, service_config, tmp_path_factory) -> Iterator[BackgroundServer]:  # noqa: F811
    # an empty document root: generated ingest paths can never add documents to the shared index
    cfg = service_config.with_overrides({"service.document_root": str(tmp_path_factory.mktemp("emptyroot")),
                                         "service.batch_dir": str(tmp_path_factory.mktemp("schema-batches"))})
    with BackgroundServer(create_app(cranfield_rag, cfg)) as srv:
        yield srv


@pytest.fixture(scope="module")
def api_schema(schema_server):
    return schemathesis.openapi.from_url(schema_server.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    if case.path in ("/metrics", "/healthz", "/readyz"):
        case.call_and_validate(checks=[not_a_server_error])
        return
    case.call_and_validate(headers=AUTH, checks=[not_a_server_error], timeout=60)
