"""The per-app state the routes share (one per :func:`~ragbudget.service.app.create_app`)."""

from __future__ import annotations

import asyncio
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from ..stages.admission import AdmissionController
from ..config import Config, TenantConfig
from ..errors import ConfigError
from ..eval.capture import TrafficCapture
from ..observe.metrics import Metrics
from ..pipeline import RAG
from ..kernels.tokens import Tokenizer


@dataclass
class Job:
    """A background job (ingest or batch) and what it reported."""

    id: str
    kind: str
    tenant: str
    state: str = "queued"  # queued, running, done, failed
    detail: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    task: asyncio.Task | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "state": self.state, "detail": self.detail,
                "error": self.error}


def keys_from_env(value: str) -> dict[str, str]:
    """``"key1:tenant1,key2:tenant2"`` → {key: tenant}."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in value.split(","))):
        key, sep, tenant = item.rpartition(":")
        if not sep or not key or not tenant:
            raise ConfigError(f"API key entry {item!r} is not KEY:TENANT",
                              fix="set e.g. RAGBUDGET_API_KEYS='sk-1:acme,sk-2:globex'")
        out[key] = tenant
    return out


@dataclass
class ServiceState:
    config: Config
    rag_factory: Callable[[], RAG]
    admission: AdmissionController
    metrics: Metrics
    tokenizer: Tokenizer
    rag: RAG | None = None
    ready: bool = False
    startup_error: str | None = None
    api_keys: dict[str, str] = field(default_factory=dict)
    auth: bool = False  # on whenever any API key is configured (service.auth unset or true)
    jobs: dict[str, Job] = field(default_factory=dict)
    in_flight: int = 0
    heap_frozen: bool = False  # gc.freeze ran at start-up (``ragbudget serve``); ingest jobs refreeze
    capture: TrafficCapture | None = None  # service.capture: opened at start-up, closed at shutdown
    # Index writes (ingest jobs, deletes) run here, not on the event loop's default pool that queries and
    # embeddings use: a write waiting up to index.lock_timeout_s for another writer's lock holds this
    # thread, never one a query needs.
    writer: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="ragbudget-writer"))

    async def run_write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the writer thread (see ``writer``)."""
        return await asyncio.get_running_loop().run_in_executor(self.writer, functools.partial(fn, *args, **kwargs))

    @property
    def tenants(self) -> dict[str, TenantConfig]:
        return {t.name: t for t in self.config.service.tenants}

    @classmethod
    def build(cls, config: Config, rag_factory: Callable[[], RAG], environ: dict[str, str] | None = None
              ) -> "ServiceState":
        svc = config.service
        names = {t.name for t in svc.tenants}
        keys = {k: t.name for t in svc.tenants for k in t.api_keys}
        env = os.environ if environ is None else environ
        for key, tenant in keys_from_env(env.get(svc.api_keys_env, "")).items():
            if tenant not in names:
                raise ConfigError(f"{svc.api_keys_env}: tenant {tenant!r} is not in service.tenants",
                                  fix=f"add it to service.tenants; known: {sorted(names)}")
            keys[key] = tenant
        if svc.auth and not keys:
            raise ConfigError("service.auth is on but no API keys are configured",
                              fix=f"set service.tenants[].api_keys or {svc.api_keys_env}")
        if svc.auth is False and keys:  # keys that are never checked: everyone would be the first tenant
            raise ConfigError(
                f"service.auth is false but {len(keys)} API key(s) are configured: every caller, with any key or "
                f"none, would be served as tenant {svc.tenants[0].name!r}",
                fix=f"remove 'service.auth: false' (auth is on whenever keys exist), or remove the keys "
                    f"(service.tenants[].api_keys, {svc.api_keys_env})")
        return cls(config=config, rag_factory=rag_factory, auth=bool(keys),
                   admission=AdmissionController(svc.admission, svc.limits, svc.tenants),
                   metrics=Metrics(), api_keys=keys,
                   tokenizer=Tokenizer(config.tokenizer.encoding,
                                       count_cache_entries=config.tokenizer.count_cache_entries))
        # ``metrics`` is replaced by the RAG's own Metrics once it is built (app startup)

    def update_load_metrics(self) -> None:
        self.metrics.set_load(degrade_level=self.admission.level, queue_depth=self.admission.queue_depth,
                              in_flight=self.in_flight)
