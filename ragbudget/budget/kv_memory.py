"""KV-cache memory estimator: bytes per token for a model shape, and what a memory budget buys.

Per token, every layer stores one key and one value vector per KV head::

    bytes/token = 2 (K and V) × layers × kv_heads × head_dim × dtype bytes

e.g. Llama-3-8B (32 layers, 8 KV heads, head dim 128, fp16) = 131,072 B = 128 KiB per token, so 16 GiB
of KV memory holds 131,072 tokens: 16 requests × 8,192 tokens, or 4 × 32,768. Pure arithmetic; no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from ..config import Config, KVSpecConfig, TierConfig
from ..errors import ConfigError

GIB = 1024 ** 3


@dataclass(frozen=True)
class KVPlan:
    """What ``memory_bytes`` of KV cache holds for one model shape."""

    bytes_per_token: float
    memory_bytes: float
    tokens: int  # total tokens the budget holds
    context_tokens: int  # per-request context the plan is sized for
    max_concurrent: int  # requests of ``context_tokens`` that fit together

    def max_context(self, concurrency: int) -> int:
        """Longest context each of ``concurrency`` simultaneous requests can have."""
        if concurrency < 1:
            raise ConfigError(f"concurrency must be ≥ 1, got {concurrency}", fix="set llm.tiers[].kv.concurrency ≥ 1")
        return self.tokens // concurrency

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: float = 2.0) -> float:
    """KV-cache bytes one token occupies (keys + values, all layers)."""
    for name, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)):
        if v <= 0:
            raise ConfigError(f"KV spec: {name} must be positive, got {v}",
                              fix="take layers, num_key_value_heads and head_dim from the model's config")
    return 2.0 * layers * kv_heads * head_dim * dtype_bytes


def spec_bytes_per_token(spec: KVSpecConfig) -> float:
    return kv_bytes_per_token(spec.layers, spec.kv_heads, spec.head_dim, spec.kv_dtype_bytes)


def plan(bytes_per_token: float, memory_bytes: float, context_tokens: int) -> KVPlan:
    """How many requests of ``context_tokens`` fit in ``memory_bytes`` of KV cache."""
    if memory_bytes <= 0 or context_tokens <= 0 or bytes_per_token <= 0:
        raise ConfigError(f"KV plan needs positive memory, context and bytes/token (got {memory_bytes}, "
                          f"{context_tokens}, {bytes_per_token})",
                          fix="set llm.tiers[].kv.memory_gb > 0 and the tier's context_window > 0")
    tokens = int(memory_bytes // bytes_per_token)
    return KVPlan(bytes_per_token=bytes_per_token, memory_bytes=memory_bytes, tokens=tokens,
                  context_tokens=context_tokens, max_concurrent=tokens // context_tokens)


def tier_context(tier: TierConfig) -> int:
    """Context a tier allocates per request: ``n_ctx`` when set (llama.cpp), else its window."""
    return int(tier.n_ctx or tier.context_window)


def tier_plan(tier: TierConfig) -> KVPlan | None:
    """The KV plan for a tier with ``kv`` and ``kv.memory_gb`` set; None otherwise."""
    if tier.kv is None or tier.kv.memory_gb is None:
        return None
    return plan(spec_bytes_per_token(tier.kv), tier.kv.memory_gb * GIB, tier_context(tier))


def check_tier(tier: TierConfig) -> KVPlan | None:
    """Raise :class:`ConfigError` when the tier's KV memory cannot hold ``kv.concurrency`` requests at its
    full context (the engine would refuse or thrash). Returns the plan (None when not configured)."""
    p = tier_plan(tier)
    if p is None or tier.kv is None:
        return p
    need = tier.kv.concurrency
    if p.max_concurrent < need:
        per_req_gib = p.bytes_per_token * p.context_tokens / GIB
        raise ConfigError(
            f"llm.tiers[{tier.name!r}].kv: {tier.kv.memory_gb:g} GiB of KV cache holds {p.tokens} tokens "
            f"= {p.max_concurrent} request(s) × {p.context_tokens} tokens, but kv.concurrency={need} "
            f"({per_req_gib:.2f} GiB per request)",
            fix=f"raise kv.memory_gb to ≥ {per_req_gib * need:.2f}, lower n_ctx/context_window to "
                f"≤ {p.max_context(need)}, or lower kv.concurrency")
    return p


def check_config(cfg: Config) -> list[tuple[str, KVPlan]]:
    """Check every tier with a KV spec (see :func:`check_tier`); returns (tier name, plan) pairs."""
    out = []
    for t in cfg.llm.tiers:
        p = check_tier(t)
        if p is not None:
            out.append((t.name, p))
    return out


def summary_rows(tiers: Sequence[TierConfig]) -> list[dict[str, Any]]:
    """One row per tier with a KV spec, for ``ragbudget info``: bytes/token, and (with memory) capacity."""
    rows = []
    for t in tiers:
        if t.kv is None:
            continue
        bpt = spec_bytes_per_token(t.kv)
        row: dict[str, Any] = {"tier": t.name, "model": t.model, "kib_per_token": round(bpt / 1024, 2),
                               "context": tier_context(t),
                               "gib_per_request": round(bpt * tier_context(t) / GIB, 3)}
        p = tier_plan(t)
        if p is not None:
            row.update(memory_gib=t.kv.memory_gb, tokens=p.tokens, max_concurrent=p.max_concurrent,
                       fits=p.max_concurrent >= t.kv.concurrency)
        rows.append(row)
    return rows


__all__ = ["KVPlan", "kv_bytes_per_token", "spec_bytes_per_token", "plan", "tier_plan", "check_tier",
           "check_config", "summary_rows", "tier_context"]
