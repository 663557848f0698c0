"""``index.backend`` → an :class:`~ragbudget.index.base.IndexBackend`; a missing package fails loudly."""

from __future__ import annotations

from ..config import Config
from ..errors import ConfigError
from .base import IndexBackend
from .local.backend import LocalBackend

BACKENDS = ("local", "postgres")
POSTGRES_INSTALL = 'pip install "ragbudget[postgres]"   (psycopg[binary,pool] and pgvector)'


def make_backend(config: Config) -> IndexBackend:
    kind = config.index.backend
    if kind == "local":
        return LocalBackend(config)
    if kind == "postgres":
        try:
            from .postgres.backend import PostgresBackend  # noqa: PLC0415 - optional dependency
        except ImportError as err:
            raise ConfigError(f"index.backend=postgres needs packages that are not installed ({err.name or err})",
                              fix=f"install them: {POSTGRES_INSTALL}") from None
        return PostgresBackend(config)
    raise ConfigError(f"unknown index backend {kind!r}", fix=f"use one of {BACKENDS}")
