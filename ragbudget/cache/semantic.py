"""Semantic response cache: a similar question in the same scope gets the stored answer.

Per :class:`~ragbudget.cache.keys.ResponseScope` (everything but the question, conversation state
included) the layer keeps an in-process matrix of normalised question embeddings
(:class:`~ragbudget.cache.vectors.VectorRows`: storing and evicting are O(1) at 100k entries; a large
scope is searched through a sign sketch and rescored exactly). A lookup takes the best
:data:`MAX_CANDIDATES` cosines ≥ ``threshold`` and decides each candidate in turn:

1. the guards and the contrast verifier (:func:`~ragbudget.cache.guards.explain`). No objection: served
   ("lexical"). A *hard* objection (numbers, negation, entities, an antonym or class pair both sides state,
   a role swap): refused, whatever follows. A name written out longer on one side of a question otherwise
   the same ("Skelton" / "Red Skelton", guards' ``name``): served within a conversation's scope, where the
   history fixes who is meant; elsewhere a grey-zone near miss (below).
2. a *soft* objection (an unexplained substitution, a one-sided modifier, extra words) goes to the learned
   verifier (:mod:`~ragbudget.cache.verifier`, ``verifier: learned``): served when its probability reaches
   the model's threshold — raised per entry by negative feedback (:meth:`feedback`, as vCache learns
   per-entry thresholds online) — else refused.
3. the optional ``verifier`` hook has the last say on a candidate that passed.

A refused candidate that is only a *near miss* — a soft refusal at cosine ≥ ``evidence_floor`` (or a pass
under the threshold) whose learned score reaches ``evidence_min_score`` (default: the model's bar) — is
marked ``grey``: on a miss the answer stage runs retrieval anyway and :meth:`serve_by_evidence` serves it
when the chunks its stored answer cited are among the new top-k (``evidence``, on by default). Hard
refusals are never grey.

Every candidate's :class:`Decision` says why it was served or refused (:meth:`lookup_explained`); a served
answer's ledger carries its decision in ``flags`` ("semantic_hit: ..."), and refusals are counted per
reason in the layer's stats (``reasons``: ``refused_<reason>``, ``accepted_<reason>``). Answers live in the KV backend under their own key, so
TTL, size bounds and Redis/SQLite sharing apply to them as to exact entries.

The vector index itself is per process: with Redis, a replica serves semantic hits for the questions
it has seen (answers are shared; the exact layer is fully shared).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..config import SemanticCacheConfig
from ..embed.encoder import Embedder
from ..errors import ConfigError
from . import contrast, guards
from . import verifier as learned
from .base import CacheStats, KVBackend, decode_json, encode_json
from .keys import ResponseScope, semantic_entry_key
from .response import CacheHit, saved_ms, saved_tokens
from .vectors import VectorRows, planes

log = logging.getLogger(__name__)

Verifier = Callable[[str, str], bool]
"""``verifier(stored_question, new_question) -> bool``: a last say on a candidate hit."""

MAX_CANDIDATES = 5


def guard_settings(config: SemanticCacheConfig) -> guards.GuardSettings:
    """The guard settings a :class:`SemanticCacheConfig` asks for."""
    on = config.guards
    return guards.GuardSettings(numbers=on and config.guard_numbers, entities=on and config.guard_entities,
                                negation=on and config.guard_negation, content=on and config.guard_content,
                                max_unmatched=config.max_unmatched_words,
                                max_unmatched_ratio=config.max_unmatched_ratio,
                                contrast=on and config.guard_contrast)


@dataclass(frozen=True)
class Decision:
    """Why one candidate was served or refused."""

    stored_question: str
    similarity: float
    accepted: bool
    reason: str  # served: "lexical" | "learned" | "name"; refused: a guard's name, "hook", "feedback" or "missing"
    hard: bool = False  # refused on evidence of a different question (no score could serve it)
    objection: str | None = None  # the soft objection the learned verifier overruled or upheld
    score: float | None = None  # the learned verifier's probability
    bar: float | None = None  # the probability it needed (model threshold + this entry's feedback)
    key: str = ""  # the entry's backend key
    grey: bool = False  # a near miss that evidence agreement may still serve (serve_by_evidence)
    evidence: str | None = None  # evidence agreement, e.g. "3/3 cited chunks in the new top 5"

    def describe(self) -> str:
        head = f"{'served' if self.accepted else 'refused'} ({self.reason}"
        if self.objection:
            head += f" over {self.objection}" if self.accepted else f" after {self.objection}"
        if self.score is not None:
            head += f", p={self.score:.2f} {'>=' if self.accepted else '<'} {self.bar:.2f}"
        if self.evidence is not None:
            head += f", evidence {self.evidence}"
        return f"{head}{', hard' if self.hard else ''}); cosine {self.similarity:.3f} to {self.stored_question!r}"


class _Scope:
    """One scope's entries: vector rows (:class:`~.vectors.VectorRows`) and, by row, what they are."""

    def __init__(self, dim: int, hyperplanes: np.ndarray, exact_max: int, shortlist: int) -> None:
        self.rows_ = VectorRows(dim, hyperplanes, exact_max=exact_max, shortlist=shortlist)
        self.questions: list[str] = []
        self.keys: list[str] = []
        self.expires: list[float] = []
        self.rows: dict[str, int] = {}

    def add(self, key: str, question: str, v: np.ndarray, expires: float) -> None:
        self.rows[key] = self.rows_.append(v)
        self.questions.append(question)
        self.keys.append(key)
        self.expires.append(expires)

    def remove(self, key: str) -> None:
        i = self.rows.pop(key)
        last = self.rows_.remove(i)
        if i != last:  # the last row moved into the hole
            self.questions[i], self.keys[i], self.expires[i] = self.questions[last], self.keys[last], self.expires[last]
            self.rows[self.keys[i]] = i
        self.questions.pop()
        self.keys.pop()
        self.expires.pop()


class SemanticResponseCache:
    """Verified nearest-question lookup within one response scope."""

    layer = "semantic"

    def __init__(self, backend: KVBackend, embedder: Embedder, config: SemanticCacheConfig | None = None, *,
                 ttl_s: float = 86400.0, verifier: Verifier | None = None, stats: CacheStats | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.embedder = embedder
        self.config = config or SemanticCacheConfig()
        self.ttl_s = float(ttl_s)
        self.verifier = verifier
        self.guard = guard_settings(self.config)
        self.learned: learned.LearnedVerifier | None = None
        self._evidence_model: learned.LearnedVerifier | None = None
        if self.config.enabled and self.guard.contrast:
            contrast.lexicon()  # load the contrast lexicon once per process now, not in the first lookup
            if self.config.verifier == "learned" or self.config.evidence:
                model = learned.load(self.config.verifier_model)
                self.learned = model if self.config.verifier == "learned" else None
                self._evidence_model = model  # scores near misses for evidence agreement
        elif self.config.verifier_model is not None:
            raise ConfigError("cache.semantic.verifier_model needs the contrast verifier (guards and guard_contrast on)")
        self.stats = stats or CacheStats("semantic")
        self._clock = clock
        self._scopes: dict[str, _Scope] = {}
        self._order: deque[tuple[str, str]] = deque()  # (scope id, entry key), oldest first
        self._queued: dict[tuple[str, str], int] = {}  # how many times each is in _order (re-stores)
        self._raise: dict[str, float] = {}  # entry key -> bar added by negative feedback (probability or cosine)
        self._planes: np.ndarray | None = None  # the sign-sketch hyperplanes (vectors.planes), per dimension
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s.keys) for s in self._scopes.values())

    def _embed(self, question: str, embedding: np.ndarray | None) -> np.ndarray:
        v = np.asarray(self.embedder.embed_query(question) if embedding is None else embedding, dtype=np.float32)
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else v

    def candidates(self, scope: ResponseScope, question: str, embedding: np.ndarray | None = None,
                   floor: float | None = None) -> list[tuple[float, str, str]]:
        """(cosine, stored question, entry key) at or above ``floor`` (default: the threshold), best first."""
        floor = self.config.threshold if floor is None else floor
        with self._lock:
            sc = self._scopes.get(scope.id)
            if sc is None or not sc.keys:
                return []
        q = self._embed(question, embedding)
        now = self._clock()
        with self._lock:
            sc = self._scopes.get(scope.id)
            if sc is None or not sc.keys:
                return []
            rows, sims = sc.rows_.search(q, MAX_CANDIDATES)
            return [(float(s), sc.questions[i], sc.keys[i]) for i, s in zip(rows.tolist(), sims.tolist())
                    if s >= floor and sc.expires[i] > now]

    def decide(self, stored: str, question: str, similarity: float, key: str = "", *,
               conversation: bool = False) -> Decision:
        """The guards, then (for a soft objection) the learned verifier, then the hook, on one candidate.

        ``conversation``: the scope is one conversation's (its history is part of the key), where a name
        written out longer ("Skelton" / "Red Skelton") names the same person; elsewhere such a near miss
        is served only by evidence agreement."""
        v = guards.explain(stored, question, self.guard)
        if v.reason == "name" and not conversation:
            return Decision(stored, similarity, False, "name")  # grey: evidence agreement may serve it
        if v.reason is not None and v.reason != "name":
            if v.hard or self.learned is None:
                if v.hard or self._evidence_model is None or not self.config.evidence:
                    return Decision(stored, similarity, False, v.reason, hard=v.hard)
                p, model_bar = self._evidence_model.judge(stored, question, similarity, v)  # for evidence
                return Decision(stored, similarity, False, v.reason, score=p, bar=model_bar)
            bump = self._raise.get(key, 0.0)
            base = self.config.verifier_min_score
            p, model_bar = self.learned.judge(stored, question, similarity, v)
            bar = min((model_bar if base is None else base) + bump, 1.0)
            if p < bar:
                return Decision(stored, similarity, False, "feedback" if bump and p >= bar - bump else "learned",
                                objection=v.reason, score=p, bar=bar)
            ok = Decision(stored, similarity, True, "learned", objection=v.reason, score=p, bar=bar)
        else:
            bump = self._raise.get(key, 0.0)  # an entry found wrong needs a closer question to be served again
            if bump and similarity < min(self.config.threshold + bump, 1.0):
                return Decision(stored, similarity, False, "feedback", objection="lexical")
            ok = Decision(stored, similarity, True, v.reason or "lexical")
        if self.verifier is not None and not self.verifier(stored, question):
            return Decision(stored, similarity, False, "hook", objection=ok.objection, score=ok.score, bar=ok.bar)
        return ok

    def lookup_explained(self, scope: ResponseScope, question: str, embedding: np.ndarray | None = None, *,
                         recheck: bool = False) -> tuple[CacheHit | None, list[Decision]]:
        """:meth:`lookup` plus the decision on every candidate it weighed (the last one served, if any).

        ``recheck``: the hit will not be served but regenerated anyway, its answer compared with the stored
        one (:meth:`feedback`): it is counted as a miss and a ``recheck``, and its record is left as stored."""
        decisions: list[Decision] = []
        if not self.config.enabled:
            return None, decisions
        cfg = self.config
        floor = min(cfg.threshold, cfg.evidence_floor) if cfg.evidence else cfg.threshold
        for sim, stored_q, key in self.candidates(scope, question, embedding, floor):
            d = self.decide(stored_q, question, sim, key, conversation=bool(scope.conversation))
            if sim < cfg.threshold:  # below the bar for a hit: at most a near miss for evidence agreement
                d = replace(d, accepted=False, reason="similarity" if d.accepted else d.reason)
            if not d.accepted:
                d = self._grade(d, key)
                decisions.append(d)
                self.stats.incr("rejected_by_guard")
                self.stats.count(f"refused_{d.reason}")
                log.debug("semantic candidate %s", d.describe())
                continue
            entry = decode_json(self.backend.get(key))
            if not isinstance(entry, dict) or not isinstance(entry.get("record"), dict):
                decisions.append(Decision(stored_q, sim, False, "missing"))
                continue  # expired, evicted or backend unavailable
            decisions.append(d)
            record = entry["record"]
            hit = CacheHit(record=record, layer=self.layer, key=key, similarity=sim, matched_question=stored_q,
                           decision=d.describe())
            if recheck:
                self.stats.miss()
                self.stats.count("recheck")
                return hit, decisions
            ledger = record.get("ledger")
            if isinstance(ledger, dict):
                ledger["flags"] = [*(ledger.get("flags") or []), f"semantic_hit: {d.describe()}"]
            self.stats.hit(saved_tokens(record), saved_ms(record))
            self.stats.count(f"accepted_{d.reason}")
            return hit, decisions
        self.stats.miss()
        return None, decisions

    def _grade(self, d: Decision, key: str) -> Decision:
        """A soft refusal at cosine ≥ ``evidence_floor`` whose learned score (:meth:`decide` scores it with the
        lexical verifier too) reaches ``evidence_min_score`` (None: the model's own bar) is a grey-zone near miss."""
        cfg = self.config
        if not cfg.evidence or d.hard or d.reason in ("hook", "feedback") or d.similarity < cfg.evidence_floor:
            return replace(d, key=key)
        if d.reason in ("similarity", "name"):  # would have been served but for the threshold / the scope
            return replace(d, key=key, grey=True)
        score, bar = d.score, d.bar  # decide() scored it (the learned verifier, or the model for evidence)
        if score is None or bar is None:
            return replace(d, key=key)
        need = bar if cfg.evidence_min_score is None else cfg.evidence_min_score
        return replace(d, key=key, grey=score >= need, score=score, bar=need)

    def serve_by_evidence(self, near: Decision, retrieved_ids: Sequence[str], k: int) -> tuple[CacheHit | None, Decision]:
        """Serve a grey-zone near miss when the chunks its stored answer cited (its context when it cited
        none) are among the new question's top ``k`` retrieved chunks, at least ``evidence_min_overlap`` of
        them. Returns the hit (or None) and the decision with the evidence it weighed."""
        entry = decode_json(self.backend.get(near.key)) if near.grey else None
        record = entry.get("record") if isinstance(entry, dict) else None
        if not isinstance(record, dict):
            return None, replace(near, reason="missing" if near.grey else near.reason)
        cited = [c.get("chunk_id") for c in record.get("citations") or [] if isinstance(c, dict)]
        cited = cited or [c.get("chunk_id") for c in record.get("context") or [] if isinstance(c, dict)]
        top = set(retrieved_ids[:k])
        shared = sum(1 for c in dict.fromkeys(cited) if c in top)
        n = len(dict.fromkeys(cited))
        ok = n > 0 and shared >= self.config.evidence_min_overlap * n
        d = replace(near, accepted=ok, reason="evidence" if ok else "evidence_disagrees",
                    evidence=f"{shared}/{n} cited chunks in the new top {k}")
        self.stats.count(f"{'accepted' if ok else 'refused'}_{d.reason}")
        if not ok:
            return None, d
        ledger = record.get("ledger")
        if isinstance(ledger, dict):
            ledger["flags"] = [*(ledger.get("flags") or []), f"semantic_hit: {d.describe()}"]
        self.stats.hit(saved_tokens(record), saved_ms(record))
        return CacheHit(record=record, layer=self.layer, key=near.key, similarity=near.similarity,
                        matched_question=near.stored_question, decision=d.describe()), d

    def lookup(self, scope: ResponseScope, question: str, embedding: np.ndarray | None = None) -> CacheHit | None:
        """The stored answer of the most similar verified question in ``scope``, or None."""
        return self.lookup_explained(scope, question, embedding)[0]

    def feedback(self, hit: CacheHit, correct: bool) -> None:
        """What an answer regenerated anyway said about a hit (``recheck_rate``, or a caller's own signal). A
        wrong hit raises that entry's bar by ``feedback_step``: the learned verifier's probability bar for a
        soft near miss, the cosine threshold for one the guards passed outright. A right one lowers a raised
        bar by a quarter step. Per entry, in process, like vCache's online thresholds."""
        if hit.layer != self.layer:
            raise ValueError(f"feedback is for semantic hits, got a {hit.layer!r} hit")
        step = self.config.feedback_step
        with self._lock:
            bump = self._raise.get(hit.key, 0.0)
            bump = bump + step if not correct else max(bump - step / 4, 0.0)
            if bump > 0:
                self._raise[hit.key] = bump
            else:
                self._raise.pop(hit.key, None)
        self.stats.count("feedback_wrong" if not correct else "feedback_right")

    def store(self, scope: ResponseScope, question: str, record: Mapping[str, Any],
              embedding: np.ndarray | None = None) -> bool:
        """Store a record; a non-JSON record raises CacheError before anything is written."""
        value = encode_json({"question": question, "record": dict(record)})
        return self.store_encoded(scope, question, value, embedding)

    def store_encoded(self, scope: ResponseScope, question: str, value: bytes,
                      embedding: np.ndarray | None = None) -> bool:
        if not self.config.enabled:
            return False
        key = semantic_entry_key(scope, question)
        if not self.backend.set(key, value, self.ttl_s):
            self.stats.incr("store_failures")
            return False
        v = self._embed(question, embedding)
        expires = self._clock() + self.ttl_s
        with self._lock:
            sc = self._scopes.get(scope.id)
            if sc is None:
                if self._planes is None or self._planes.shape[0] != v.shape[0]:
                    self._planes = planes(v.shape[0])
                sc = self._scopes[scope.id] = _Scope(v.shape[0], self._planes, self.config.exact_search_max_entries,
                                                     self.config.search_shortlist)
            if key in sc.rows:
                sc.remove(key)  # its old (scope, key) order entry is skipped as stale at eviction
            sc.add(key, question, v, expires)
            self._order.append((scope.id, key))
            self._queued[(scope.id, key)] = self._queued.get((scope.id, key), 0) + 1
            self._evict_over_capacity()
        self.stats.incr("stores")
        return True

    def _evict_over_capacity(self) -> None:
        total = sum(len(s.keys) for s in self._scopes.values())
        while total > self.config.max_entries and self._order:
            scope_id, key = item = self._order.popleft()
            left = self._queued.pop(item, 1) - 1
            if left > 0:
                self._queued[item] = left
                continue  # re-stored later: its newer order entry evicts it
            sc = self._scopes.get(scope_id)
            if sc is None or key not in sc.rows:
                continue
            sc.remove(key)
            self._raise.pop(key, None)
            total -= 1
            if not sc.keys:
                del self._scopes[scope_id]

    def clear(self) -> None:
        with self._lock:
            self._scopes.clear()
            self._order.clear()
            self._queued.clear()
            self._raise.clear()
