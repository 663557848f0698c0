"""API keys → tenants; a tenant sees only its own indexes."""

from __future__ import annotations

import hmac

from fastapi import Request

from ..config import TenantConfig
from ..openai_surface import default_index
from .errors import ApiError
from .state import ServiceState


def get_state(request: Request) -> ServiceState:
    return request.app.state.svc


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def current_tenant(request: Request) -> TenantConfig:
    """FastAPI dependency: the caller's tenant. With auth off, the first configured tenant."""
    state = get_state(request)
    tenants = state.config.service.tenants
    if not state.config.service.auth:
        return tenants[0]
    key = _presented_key(request)
    if not key:
        raise ApiError(401, "unauthorized", "missing API key",
                       "send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                       headers={"WWW-Authenticate": "Bearer"})
    for known, tenant in state.api_keys.items():
        if hmac.compare_digest(known.encode(), key.encode()):
            return state.tenants[tenant]
    raise ApiError(401, "unauthorized", "invalid API key", "check the key", headers={"WWW-Authenticate": "Bearer"})


def tenant_index(state: ServiceState, tenant: TenantConfig, requested: str | None) -> str:
    """The index to use; an index outside the tenant's list is 'not found' (its existence is not leaked)."""
    if requested is None:
        default = state.config.index.name
        preferred = default if default in tenant.indexes or "*" in tenant.indexes else tenant.indexes[0]
        built = state.rag.list_indexes() if state.rag is not None else []
        if preferred in built:
            return preferred
        return default_index(preferred, visible_indexes(tenant, built))
    if requested not in tenant.indexes and "*" not in tenant.indexes:
        raise ApiError(404, "IndexNotFoundError", f"no index named {requested!r}",
                       "GET /v1/indexes lists the indexes you can use")
    return requested


def visible_indexes(tenant: TenantConfig, built: list[str]) -> list[str]:
    """The built indexes this tenant may query."""
    return [n for n in built if n in tenant.indexes or "*" in tenant.indexes]
