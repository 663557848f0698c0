"""Fit retrieved chunks into the retrieved-context budget by query-aware sentence selection.

Each chunk is split into sentences (llama-index's punkt splitter); every sentence gets a score that
mixes its own relevance to the query with its chunk's relevance. The best sentences are packed greedily
across all chunks until the budget is spent, so each chunk loses its weakest sentences before a whole
chunk is dropped. A sentence is cut only when it alone is larger than the whole budget. Kept sentences
stay in their original order inside their chunk (gaps are marked with " … "), and each kept piece keeps
its chunk (and so its citation). Scoring (:meth:`SentencePlan.build`) is separate from packing
(:meth:`SentencePlan.pack`) so one plan can be packed at many budgets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..config import TrimConfig
from ..retrieval.rerank import Reranker
from ..kernels.sentences import split_sentences
from ..kernels.tokens import Tokenizer
from ..types import Scored
from .evidence import (TermsFn, WeightsFn, asks_about_time, bare_title, default_terms, dialog_flow,
                       drop_title_line, gap_limit, minmax, opens_with_reference, prune_parentheses, question_scripts,
                       question_share, question_weights, retrieval_ranks)

GAP = " … "
MIN_TRUNCATED_TOKENS = 8  # a cut sentence shorter than this carries no meaning; skip it instead


@dataclass
class TrimResult:
    """Chunks as they go into the prompt (text possibly reduced), plus what was dropped or compressed.

    ``stop`` says why packing stopped: ``evidence`` (the next sentence scored under the evidence floor),
    ``budget`` (the next sentence did not fit), ``exhausted`` (every candidate sentence is in) or ``empty``.
    """

    kept: list[Scored]
    used: int
    dropped: list[dict[str, Any]] = field(default_factory=list)
    compressed: list[dict[str, Any]] = field(default_factory=list)
    stop: str = "exhausted"
    stop_note: str = ""


@dataclass
class SentencePlan:
    """Sentences of the candidate chunks with their token counts and evidence scores."""

    items: list[Scored]
    sentences: list[list[str]]
    tokens: list[list[int]]
    scores: list[list[float]]
    chunk_tokens: list[int]
    term_sets: list[list[frozenset[str]]] = field(default_factory=list)
    lexical: list[list[float]] = field(default_factory=list)  # share of the question's term weight held
    query_weights: dict[str, float] = field(default_factory=dict)  # question term → idf
    question: str = ""
    flow: list[tuple[int, int]] = field(default_factory=list)  # (chunk, sentence) after the last answer's
    followup: bool = False  # the question follows an answer in a conversation
    pruned: dict[tuple[int, int], int] = field(default_factory=dict)  # (chunk, sentence) → tokens of asides left out

    @classmethod
    def build(cls, query: str, items: Sequence[Scored], tokenizer: Tokenizer,
              scorer: Reranker | None, cfg: TrimConfig, *, terms: TermsFn | None = None,
              term_weights: WeightsFn | None = None, previous_answer: str = "") -> "SentencePlan":
        """Split and score every sentence of ``items`` (best-first candidates).

        A sentence's evidence score adds three signals: its cosine with the question (``scorer``; without
        one, its chunk's min-max scaled score stands in), the share of the question's term weight it holds
        (``terms`` analyses text into index terms; ``term_weights`` gives each term its idf, by default
        computed over the candidates themselves) and a prior for the rank of its chunk in retrieval order. In a
        conversation (``previous_answer``: the last assistant turn) the sentence that follows the one the answer
        came from gains ``cfg.dialog_flow`` (see :func:`~.evidence.dialog_flow`).
        """
        items = list(items)
        sents = [split_sentences(_text_of(s)) for s in items]
        flat = [x for ss in sents for x in ss]
        counts = tokenizer.count_many(flat) if flat else []
        if scorer is not None and flat and cfg.sentence_weight > 0:
            dense = [float(v) for v in np.asarray(scorer.score(query, flat), dtype=float)]
        else:
            chunk_rel = minmax([s.score for s in items])
            dense = [0.5 * chunk_rel[ci] for ci, ss in enumerate(sents) for _ in ss]
        terms = terms or default_terms()
        flat_sets = [frozenset(terms(x)) for x in flat]
        q_terms = list(dict.fromkeys(terms(query)))
        q_weights = question_weights(q_terms, sents, terms, term_weights)
        lex = question_share(q_terms, flat_sets, q_weights)
        order = retrieval_ranks(items)
        tokens, scores, term_sets, lexical, k = [], [], [], [], 0
        for ci, ss in enumerate(sents):
            prior = cfg.rank_prior / (1.0 + order[ci] / 3.0)
            tokens.append(list(counts[k:k + len(ss)]))
            term_sets.append(flat_sets[k:k + len(ss)])
            lexical.append(lex[k:k + len(ss)])
            scores.append([cfg.sentence_weight * dense[k + j] + cfg.lexical_weight * lex[k + j] + prior
                           for j in range(len(ss))])
            k += len(ss)
        flow = (dialog_flow(previous_answer, term_sets, terms, cfg.dialog_flow_match)
                if cfg.dialog_flow > 0 and previous_answer else [])
        for ci, j in flow:
            scores[ci][j] += cfg.dialog_flow
        for ci, (s, ss) in enumerate(zip(items, sents)):
            # scored with its title line, sent without it when the sentence names the title again (the
            # header's job): the title would be paid for twice
            short = drop_title_line(ss[0], s.chunk.title) if ss else ""
            if short and short != ss[0]:
                ss[0], tokens[ci][0] = short, tokenizer.count(short)
        dates = cfg.drop_unasked_dates and not asks_about_time(query)
        pruned: dict[tuple[int, int], int] = {}
        if cfg.drop_foreign_glosses or dates:  # scored as written, sent without the asides the question cannot use
            scripts = question_scripts(query)
            q_words = frozenset(w.lower() for w in re.findall(r"\w+", query) if len(w) > 2)
            for ci, ss in enumerate(sents):
                for j, x in enumerate(ss):
                    short = prune_parentheses(x, scripts, q_words, glosses=cfg.drop_foreign_glosses, dates=dates)
                    if short != x:
                        n = tokenizer.count(short)
                        pruned[(ci, j)] = tokens[ci][j] - n
                        ss[j], tokens[ci][j] = short, n
        chunk_tokens = [tokenizer.count(_text_of(s)) for s in items]
        return cls(items=items, sentences=sents, tokens=tokens, scores=scores, chunk_tokens=chunk_tokens,
                   term_sets=term_sets, lexical=lexical, query_weights=q_weights, question=query, flow=flow,
                   followup=bool(previous_answer), pruned=pruned)

    def pack(self, budget: int, cfg: TrimConfig, tokenizer: Tokenizer, *,
             overhead_per_chunk: int = 0) -> TrimResult:
        """Choose sentences for at most ``budget`` tokens (counting ``overhead_per_chunk`` for each chunk
        used, e.g. its citation header, and one separator token between pieces).

        Sentences go in best first; with ``cfg.adaptive`` packing stops at the first one scoring under
        ``cfg.evidence_floor`` × the best score, so a question whose evidence is one sentence gets one
        sentence however large the budget, and at the largest score drop among the best ``cfg.gap_window``
        (adaptive-k); then a document the evidence names by title sends its best sentences (``cfg.bridge``).
        The same sentence repeated in overlapping chunks is taken once.
        """
        budget = max(int(budget), 0)
        if not cfg.sentence_selection:
            return self._pack_whole(budget, cfg, overhead_per_chunk)
        cand = [(sc, ci, j) for ci, row in enumerate(self.scores) for j, sc in enumerate(row)
                if sc >= cfg.min_sentence_score]
        cand.sort(key=lambda t: (-t[0], t[1], t[2]))
        if not cand:
            return self._result({}, 0, cfg, set(), stop="empty")
        best = cand[0][0]
        floor = cfg.evidence_floor * best if cfg.adaptive else -np.inf
        wfloor = cfg.window_floor * best
        chosen: dict[int, dict[int, str]] = {}
        seen: set[str] = set()
        kept_sets: list[frozenset[str]] = []
        used = 0
        truncated: set[int] = set()
        stop, note, skipped = "exhausted", "", 0
        q_total = sum(self.query_weights.values())
        covered: set[str] = set()
        limit, gap_note = gap_limit([c[0] for c in cand], cfg) if cfg.adaptive else (len(cand), "")
        buffered = limit - cfg.gap_buffer if gap_note and cfg.buffer_novelty > 0 else limit
        looked = 0  # candidates looked at past the gap for a buffer sentence
        primaries = 0

        def add(ci: int, jj: int) -> bool:
            """Put sentence jj of chunk ci in if it is new and fits; False when it did not fit."""
            nonlocal used
            text = self.sentences[ci][jj]
            key = " ".join(text.split()).lower()
            if key in seen or self._near_duplicate(ci, jj, kept_sets, cfg.duplicate_similarity):
                return True
            cost = self.tokens[ci][jj] + 1 + (overhead_per_chunk if ci not in chosen else 0)
            if used + cost > budget:
                return False
            chosen.setdefault(ci, {})[jj] = text
            seen.add(key)
            if self.term_sets:
                kept_sets.append(self.term_sets[ci][jj])
                covered.update(t for t in self.term_sets[ci][jj] if t in self.query_weights)
            used += cost
            return True

        for sc, ci, j in cand:
            if used and primaries >= limit:
                stop, note = "evidence", gap_note
                break
            if used and sc < floor:
                stop = "evidence"
                note = (f"evidence ran out: next sentence scored {sc:.2f} < {cfg.evidence_floor:g} × best "
                        f"{best:.2f}")
                break
            if used and cfg.adaptive and q_total > 0 and sc < cfg.coverage_floor * best:
                cov = sum(self.query_weights[t] for t in covered) / q_total
                if cov >= cfg.coverage_stop:
                    stop = "evidence"
                    note = (f"question covered: the context holds {cov:.0%} of the question's term weight and "
                            f"the next sentence scored {sc:.2f} < {cfg.coverage_floor:g} × best {best:.2f}")
                    break
            if used and primaries >= buffered and q_total > 0 and self.term_sets:
                # past the gap: a buffer sentence must bring question terms the context lacks
                gain = sum(self.query_weights[t] for t in self.term_sets[ci][j]
                           if t in self.query_weights and t not in covered) / q_total
                if gain < cfg.buffer_novelty:
                    looked += 1
                    if looked > cfg.buffer_reach:
                        stop, note = "evidence", gap_note + "; nothing past it adds question terms"
                        break
                    continue
            w = cfg.sentence_window if sc >= wfloor else 0
            n = len(self.sentences[ci])
            before_primary = used
            around = [x for x in range(j - w, j + w + 1) if x != j and 0 <= x < n]
            if cfg.anaphora and j > 0 and j - 1 not in around and opens_with_reference(self.sentences[ci][j]):
                around.insert(0, j - 1)  # "He then …": the sentence naming who comes along
            for jj in [j] + around:
                if add(ci, jj):
                    continue
                text = self.sentences[ci][jj]
                cost = self.tokens[ci][jj] + 1 + overhead_per_chunk
                if jj == j and not chosen and cost > budget:
                    # the best sentence alone exceeds the whole budget: the one case where we cut a sentence
                    room = budget - used - 1 - overhead_per_chunk
                    if room >= MIN_TRUNCATED_TOKENS:
                        chosen[ci] = {j: tokenizer.truncate(text, room)}
                        seen.add(" ".join(text.split()).lower())
                        used += room + 1 + overhead_per_chunk
                        truncated.add(ci)
                elif jj == j:
                    skipped += 1
            if used > before_primary:
                primaries += 1
        if stop == "exhausted" and skipped:
            stop, note = "budget", f"budget full: {skipped} relevant sentences did not fit in {budget} tokens"
        flowed = [self.items[ci].chunk.title or self.items[ci].chunk.doc_id for ci, j in self.flow
                  if j in chosen.get(ci, {})]
        if flowed:
            note = (note + "; " if note else "") + "dialog flow: the sentence after the last answer's in " + \
                ", ".join(repr(t) for t in flowed)
        # Bridge (multi-hop): a document the evidence names by title (where the first hop leads) comes along.
        if cfg.bridge > 0 and chosen:
            added = self._bridge(chosen, cfg.bridge, cfg.bridge_sentences, add)
            if added:
                note = (note + "; " if note else "") + "bridge: " + ", ".join(added) + " named by the evidence"
        # Parent of the best sentence: when that sentence alone holds little of the question (the answer is
        # likely a neighbour the question does not echo), its whole chunk goes in if it takes at most
        # parent_share of the budget (followup_parent_share for a question that follows an answer).
        top = cand[0][1]
        best_lex = self.lexical[top][cand[0][2]] if self.lexical else 1.0
        share = max(cfg.parent_share, cfg.followup_parent_share if self.followup else 0.0)
        if (share > 0 and top not in truncated and best_lex < cfg.parent_confidence
                and self.chunk_tokens[top] + overhead_per_chunk <= share * budget
                and len(chosen.get(top, {})) < len(self.sentences[top])):
            before = used
            for jj in range(len(self.sentences[top])):
                add(top, jj)
            if used > before:
                note = (note + "; " if note else "") + (
                    f"whole chunk of the best sentence added ({used - before} tokens): that sentence holds "
                    f"{best_lex:.0%} of the question's term weight")
        saved = sum(self.pruned.get((ci, j), 0) for ci, picks in chosen.items() for j in picks)
        if saved > 0:
            note = (note + "; " if note else "") + (
                f"asides: {saved} tokens of parenthesised glosses or dates the question does not ask for left out")
        return self._result(chosen, used, cfg, truncated, stop=stop, note=note)

    def _bridge(self, chosen: dict[int, dict[int, str]], limit: int, per_doc: int,
                add: Callable[[int, int], bool]) -> list[str]:
        """Add the ``per_doc`` best sentences of up to ``limit`` unchosen candidates whose document title the chosen
        sentences name and the question does not (a new entity: whole words, case-insensitive, a parenthesised
        qualifier ignored); their titles."""
        kept_text = " ".join(t for picks in chosen.values() for t in picks.values()).lower()
        question = self.question.lower()
        chosen_docs = {self.items[ci].chunk.doc_id for ci in chosen}
        added: list[str] = []
        for ci, s in enumerate(self.items):
            if len(added) >= limit:
                break
            title = bare_title(s.chunk.title)
            if ci in chosen or s.chunk.doc_id in chosen_docs or not title or not self.scores[ci]:
                continue
            named = re.compile(r"(?<!\w)" + re.escape(title) + r"(?!\w)")
            if not named.search(kept_text) or named.search(question):
                continue
            for j in sorted(range(len(self.scores[ci])), key=lambda x: -self.scores[ci][x])[:per_doc]:
                add(ci, j)
            if ci in chosen:
                chosen_docs.add(s.chunk.doc_id)
                added.append(repr(s.chunk.title))
        return added

    def _near_duplicate(self, ci: int, j: int, kept: list[frozenset[str]], threshold: float) -> bool:
        """Is sentence ``j`` of chunk ``ci`` a near-copy (term-set Jaccard ≥ threshold) of one already in?"""
        if threshold >= 1.0 or not self.term_sets or not kept:
            return False
        a = self.term_sets[ci][j]
        if len(a) < 4:
            return False
        return any(len(a & b) / len(a | b) >= threshold for b in kept if b)

    def _pack_whole(self, budget: int, cfg: TrimConfig, overhead: int) -> TrimResult:
        chosen: dict[int, dict[int, str]] = {}
        used = 0
        skipped = 0
        order = sorted(range(len(self.items)), key=lambda i: -self.items[i].score)
        for ci in order:
            cost = self.chunk_tokens[ci] + 1 + overhead
            if self.chunk_tokens[ci] and used + cost <= budget:
                chosen[ci] = dict(enumerate(self.sentences[ci]))
                used += cost
            elif self.chunk_tokens[ci]:
                skipped += 1
        stop = "budget" if skipped else "exhausted"
        note = f"budget full: {skipped} chunks did not fit in {budget} tokens" if skipped else ""
        return self._result(chosen, used, cfg, set(), whole=True, stop=stop, note=note)

    def _result(self, chosen: dict[int, dict[int, str]], used: int, cfg: TrimConfig,
                truncated: set[int], whole: bool = False, stop: str = "exhausted", note: str = "") -> TrimResult:
        dropped, compressed, kept_pairs = [], [], []
        for ci, s in enumerate(self.items):
            if ci not in chosen:
                reason = "empty" if not self.sentences[ci] else ("below evidence floor" if stop == "evidence"
                                                                 else "over budget")
                dropped.append({"chunk_id": s.chunk.id, "reason": reason, "tokens": self.chunk_tokens[ci]})
                continue
            picks = chosen[ci]
            if whole:
                text = _text_of(s)
            else:
                parts: list[str] = []
                prev = -1
                for j in sorted(picks):
                    if parts and j != prev + 1:
                        parts.append(GAP.strip())
                    parts.append(picks[j])
                    prev = j
                text = " ".join(parts)
            n_after = sum(self.tokens[ci][j] for j in picks) if not whole else self.chunk_tokens[ci]
            if not whole and (len(picks) < len(self.sentences[ci]) or ci in truncated):
                compressed.append({"chunk_id": s.chunk.id, "tokens_before": self.chunk_tokens[ci],
                                   "tokens_after": n_after, "sentences_kept": len(picks),
                                   "sentences_total": len(self.sentences[ci]),
                                   **({"note": "sentence truncated"} if ci in truncated else {})})
            best = max(self.scores[ci][j] for j in picks) if picks and self.scores[ci] else 0.0
            chunk = replace(s.chunk, text=text, n_tokens=n_after)
            kept_pairs.append((best, ci, replace(s, chunk=chunk)))
        kept_pairs.sort(key=lambda t: (-t[0], t[1]))
        kept = order_context([p[2] for p in kept_pairs], cfg.order)
        return TrimResult(kept=kept, used=used, dropped=dropped, compressed=compressed, stop=stop, stop_note=note)


def order_context(items: list[Scored], order: str) -> list[Scored]:
    """``relevance``: as given (best first). ``edges``: best at both ends, weakest in the middle
    (ranks 1, 3, 5, … then …, 6, 4, 2) against lost-in-the-middle."""
    if order != "edges" or len(items) < 3:
        return list(items)
    front = items[0::2]
    back = items[1::2]
    return front + back[::-1]


def trim_chunks(query: str, items: Sequence[Scored], budget: int, tokenizer: Tokenizer,
                scorer: Reranker | None, cfg: TrimConfig, *, overhead_per_chunk: int = 0,
                previous_answer: str = "") -> TrimResult:
    """Score and pack in one call (see :class:`SentencePlan`)."""
    plan = SentencePlan.build(query, items, tokenizer, scorer, cfg, previous_answer=previous_answer)
    return plan.pack(budget, cfg, tokenizer, overhead_per_chunk=overhead_per_chunk)


def _text_of(s: Scored) -> str:
    t = s.chunk.text
    return t if isinstance(t, str) else ""
