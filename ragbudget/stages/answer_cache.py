"""The response-cache stage: the scope a stored answer is valid for, lookup (exact, then semantic), store.

A scope pins everything an answer depends on — tenant, index version, prompt version and static prefix,
model tiers, mode, output tokens, sampling, filters and the conversation — so an entry made under any other
setting, or from an older index, is never served. Cache failures are logged and the query goes on.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .accounting import as_cache_hit, not_cacheable
from ..cache import CacheLayers
from ..cache.response import CacheHit
from ..cache.keys import ResponseScope, conversation_fingerprint, digest
from ..cache.semantic import Decision
from ..config import Config
from ..embed.encoder import Embedder
from ..errors import CacheError
from ..index.filters import fingerprint as filter_fingerprint
from ..kernels.text import unicode_words
from ..retrieval.registry import LoadedIndex
from .prompt import fingerprint, static_prefix
from .request import QueryRequest
from ..types import Answer, Ledger, Scored

log = logging.getLogger("ragbudget")
_CITATION = re.compile(r"\[\d+\]")  # an answer's [n] marks: not words of what it says


@dataclass(frozen=True)
class Recheck:
    """A semantic hit not served but regenerated anyway (``cache.semantic.recheck_rate``): once the fresh
    answer exists, the two are compared and the entry learns from it (:meth:`AnswerCache.store`)."""

    hit: CacheHit


def answer_agreement(a: str, b: str) -> float:
    """Do two answers say the same thing? The share of the shorter answer's words (case, punctuation,
    articles and [n] citation marks ignored) that the longer one holds — a fuller answer that contains the
    short one agrees with it — and 0 when both state numbers and not the same ones ("won 2" / "won 230")."""
    def words(t: str) -> set[str]:
        return {w for w in unicode_words(_CITATION.sub(" ", t.lower())) if w not in ("a", "an", "the")}
    x, y = words(a), words(b)
    if not x or not y:
        return float(x == y)
    nx, ny = {w for w in x if w.isdigit()}, {w for w in y if w.isdigit()}
    if nx and ny and nx != ny:
        return 0.0
    return len(x & y) / min(len(x), len(y))


class AnswerCache:
    """``layers`` and ``embedder`` are getters, so a query that never needs them loads nothing."""

    def __init__(self, config: Config, layers: Callable[[], CacheLayers], embedder: Callable[[], Embedder]) -> None:
        self.config = config
        self._layers = layers
        self._embedder = embedder
        self._tiers_fp = digest([t.model_dump() for t in config.llm.tiers])
        self._prefix_fps: dict[str, str] = {}
        self._lock = threading.Lock()

    def _prefix_fp(self, mode: str) -> str:
        with self._lock:
            fp = self._prefix_fps.get(mode)
            if fp is None:
                fp = self._prefix_fps[mode] = fingerprint(static_prefix(self.config.prompt, mode))
            return fp

    def scope(self, loaded: LoadedIndex | None, req: QueryRequest) -> ResponseScope:
        s = req.sampling
        return ResponseScope(tenant=req.tenant, index_version=loaded.cache_version if loaded else "",
                             temperature=s.temperature, top_p=s.top_p, stop=s.stop, seed=s.seed,
                             filters=filter_fingerprint(req.filters) if req.filters else "",
                             prompt_version=f"{self.config.prompt.version}:{self._prefix_fp(req.mode)}",
                             model_tier=self._tiers_fp, max_tokens=req.out_tokens, mode=req.mode,
                             conversation=conversation_fingerprint(req.history))

    def _recheck(self, question: str) -> bool:
        """Is this question one of the ``recheck_rate`` share answered fresh even on a semantic hit? (A hash
        of the question decides: reproducible, and the same question always gets the same answer path.)"""
        rate = self.config.cache.semantic.recheck_rate
        return rate > 0 and int(digest("recheck", question)[:8], 16) < rate * 0x100000000

    def lookup(self, scope: ResponseScope, question: str, stages: dict[str, float], t_start: float,
               near: list[Any] | None = None) -> Answer | None:
        """The stored answer as a hit (zero usage; what it saved in ``ledger.saved``), or None. The semantic
        layer embeds the question only when the exact layer missed; on a miss ``near`` receives its decision
        on every candidate it refused (for :meth:`by_evidence` and the ledger), and a :class:`Recheck` when
        the hit is one to regenerate anyway (for :meth:`store`)."""
        t0 = time.perf_counter()
        hit = None
        rc = self._layers().response
        if rc is not None:
            try:
                hit = rc.exact.lookup(scope, question)
                if hit is None and rc.semantic is not None:
                    recheck = near is not None and self._recheck(question)
                    hit, decisions = rc.semantic.lookup_explained(scope, question,
                                                                  self._embedder().embed_query(question),
                                                                  recheck=recheck)
                    if recheck and hit is not None and near is not None:
                        near.append(Recheck(hit))
                        hit = None
                    elif hit is None and near is not None:
                        near.extend(decisions)
            except CacheError as err:
                log.warning("response cache lookup failed: %s", err)
        stages["cache_response"] = (time.perf_counter() - t0) * 1000.0
        if hit is None:
            return None
        return as_cache_hit(Answer.from_dict(hit.record), layer=hit.layer, question=question,
                            lookup_ms=stages["cache_response"], total_ms=(time.perf_counter() - t_start) * 1000.0)

    def by_evidence(self, question: str, near: Sequence[Any], retrieved: Sequence[Scored], ledger: Ledger,
                    stages: dict[str, float], t_start: float) -> Answer | None:
        """After a miss, with the new question's retrieval (which the retrieval stage then uses as it is):
        a grey-zone near miss (:attr:`Decision.grey`) is served when the chunks its answer cited are among
        the top ``retrieval.top_k`` retrieved. Every refused candidate, and why, goes into ``ledger.flags``
        of the answer generated instead ("semantic_near_miss: ...")."""
        rc = self._layers().response
        sem = rc.semantic if rc is not None else None
        if sem is None or not near:
            return None
        t0 = time.perf_counter()
        ids = [s.chunk.id for s in retrieved]
        for d in near:
            hit = None
            if not isinstance(d, Decision):  # a Recheck: regenerated anyway, whatever the evidence says
                continue
            if d.grey:
                try:
                    hit, d = sem.serve_by_evidence(d, ids, self.config.retrieval.top_k)
                except CacheError as err:
                    log.warning("response cache lookup failed: %s", err)
            if hit is not None:
                stages["cache_evidence"] = (time.perf_counter() - t0) * 1000.0
                return as_cache_hit(Answer.from_dict(hit.record), layer=hit.layer, question=question,
                                    lookup_ms=stages.get("cache_response", 0.0) + stages["cache_evidence"],
                                    total_ms=(time.perf_counter() - t_start) * 1000.0)
            ledger.flags.append(f"semantic_near_miss: {d.describe()}")
        stages["cache_evidence"] = (time.perf_counter() - t0) * 1000.0
        return None

    def store(self, scope: ResponseScope, question: str, ans: Answer, near: Sequence[Any] = ()) -> None:
        """Store a generated answer; a :class:`Recheck` in ``near`` first learns whether it agreed (not from a
        degraded or fallback answer, which is not stored either)."""
        rc = self._layers().response
        if rc is None:
            return
        why = not_cacheable(ans, self.config)
        if why is not None:  # degraded, fallback or substitute answers are never served later as normal hits
            ans.ledger.flags.append(f"not_cached:{why}")  # nor do they say whether a cached one was right
            return
        for r in near:
            if isinstance(r, Recheck) and rc.semantic is not None:
                self._learn(rc.semantic, r.hit, ans)
        try:
            emb = self._embedder().embed_query(question) if self.config.cache.semantic.enabled else None
            rc.store(scope, question, ans.to_dict(), embedding=emb)
        except CacheError as err:
            log.warning("could not cache the answer: %s", err)

    def _learn(self, semantic: Any, hit: CacheHit, ans: Answer) -> None:
        """Feedback from an answer regenerated anyway: agreement with the answer the hit would have served."""
        if ans.finish_reason not in ("stop", "length"):
            return  # a failed generation says nothing about the cached answer
        agree = answer_agreement(ans.answer, str(hit.record.get("answer", "")))
        agreed = agree >= self.config.cache.semantic.recheck_agreement
        semantic.feedback(hit, agreed)
        ans.ledger.flags.append(
            f"semantic_recheck: the answer cached for {hit.matched_question!r} (cosine {hit.similarity:.3f}) "
            f"{'agreed' if agreed else 'disagreed: its bar is raised'} (agreement {agree:.2f} with this answer)")
