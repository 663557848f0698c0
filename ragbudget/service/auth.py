"""API keys → tenants, and the one place that resolves which index a request may use.

Auth is on whenever any API key is configured (``service.auth`` unset); ``service.auth: false`` with keys
configured refuses to start (:meth:`ServiceState.build`), so keys are never silently ignored.

:func:`tenant_index` is the only index resolver of the service: ``/v1/query``, the OpenAI ``model`` and
``extra_body.index``, every batch line, ingest, delete — each names an index (or none) and gets back a name
the tenant may use, or a 404 that neither confirms that another tenant's index exists nor lists any name
or server path.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from ..config import TenantConfig
from ..index.names import valid_name
from .openai_surface import default_index
from .errors import ApiError
from .state import ServiceState


def get_state(request: Request) -> ServiceState:
    return request.app.state.svc


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def authenticate(state: ServiceState, request: Request) -> TenantConfig:
    """The caller's tenant. With auth off (no keys configured), the first configured tenant."""
    tenants = state.config.service.tenants
    if not state.auth:
        return tenants[0]
    key = _presented_key(request)
    if not key:
        raise ApiError(401, "unauthorized", "missing API key",
                       "send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                       headers={"WWW-Authenticate": "Bearer"})
    found = None
    for known, tenant in state.api_keys.items():  # compare against every key: no early exit to time
        if hmac.compare_digest(known.encode(), key.encode("utf-8", "surrogatepass")):
            found = tenant
    if found is None:
        raise ApiError(401, "unauthorized", "invalid API key", "check the key",
                       headers={"WWW-Authenticate": "Bearer"})
    return state.tenants[found]


def current_tenant(request: Request) -> TenantConfig:
    """FastAPI dependency: the caller's tenant (401 without a valid key when auth is on)."""
    return authenticate(get_state(request), request)


def may_use(tenant: TenantConfig, name: str) -> bool:
    return name in tenant.indexes or "*" in tenant.indexes


def _not_found(name: str) -> ApiError:
    return ApiError(404, "IndexNotFoundError", f"no index named {name!r}",
                    "GET /v1/indexes lists the indexes you can use")


def tenant_index(state: ServiceState, tenant: TenantConfig, requested: str | None, *,
                 must_exist: bool = True) -> str:
    """The index a request uses. ``requested`` None: ``index.name`` when the tenant may use it, else the
    tenant's first index (or the only built one it can see). An index outside the tenant's list, or (with
    ``must_exist``) one not built, is 404 ``IndexNotFoundError`` — the same answer either way, naming only
    what the caller sent; an invalid name is 400 naming ``index``."""
    built = state.rag.list_indexes() if state.rag is not None else []
    if requested is None:
        default = state.config.index.name
        preferred = default if may_use(tenant, default) else tenant.indexes[0]
        name = preferred if preferred in built else default_index(preferred, visible_indexes(tenant, built))
        if name == "*" or not may_use(tenant, name):
            raise ApiError(404, "IndexNotFoundError", "no index to use by default for this tenant",
                           "name an index ('index' or the model 'INDEX'); GET /v1/indexes lists yours")
    else:
        name = requested
        if not valid_name(name):
            raise ApiError(400, "invalid_index_name", f"invalid index name {name!r}",
                           "use letters, digits, '_', '-' or '.', not starting with '.' or '-'")
        if not may_use(tenant, name):
            raise _not_found(name)
    if must_exist and name not in built:
        raise _not_found(name)
    return name


def visible_indexes(tenant: TenantConfig, built: list[str]) -> list[str]:
    """The built indexes this tenant may query."""
    return [n for n in built if may_use(tenant, n)]
