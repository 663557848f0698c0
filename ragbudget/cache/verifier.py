"""Learned near-miss verifier: a small logistic model over lexical and embedding evidence.

The contrast verifier (:mod:`~ragbudget.cache.contrast`) refuses two kinds of near misses. *Hard*
refusals are evidence of a different question — numbers, negation, entities, an antonym or class pair
both sides state, a role swap — and stay refusals. *Soft* refusals are only absence of evidence: a word
substituted without a known synonym ("lose weight quickly" / "fastest way to lose weight"), a one-sided
modifier, extra content words. Most real duplicate questions land there, so a cache that refuses all of
them answers one duplicate in five. This module scores a soft refusal with a logistic model over
:data:`FEATURES` (the cosine of the two question embeddings, the verdict's word counts, overlap, length,
whether both are questions, the question words, a wh-word or yes/no mismatch, and whether two questions
name an entity: about a named person or work, another predicate asks for another fact — "Where did X grow
up?" / "Where was X born?" — where a how-to question's reworded verb rarely does) and accepts it when the
probability reaches the model's bar (one for question pairs, a higher one for questions that differ by a
one-sided contrast word, and one for other sentences).

The model ships as ``data/verifier.json`` (weights, feature scaling, threshold and the data it was fit
on); :mod:`~ragbudget.cache.build_verifier` builds it deterministically from labelled pairs. Scoring is a
dot product of 21 numbers: microseconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError
from ..kernels.text import contrast_tokens
from .contrast import AUXILIARIES as _AUX, WH_WORDS as _WH, Verdict, strip_fillers
from .guards import entities

MODEL_PATH = Path(__file__).with_name("data") / "verifier.json"
FEATURES = ("cosine", "left_total", "left_max", "left_min", "unmatched_share", "one_sided", "jaccard",
            "n_min", "n_max", "substitution", "contrast", "content", "cos_x_share", "same_wh",
            "questions", "len_ratio", "words_max", "cos_x_questions", "wh_conflict", "yesno_vs_wh",
            "entity_question")
# the model's features were fit with "how" a group of its own (contrast.WH_GROUP joins it to "what")
_WH_GROUP = {"which": "what", "whom": "who", "whose": "who"}  # "what" / "which" ask alike


def _wh(text: str) -> str:
    toks = contrast_tokens(strip_fillers(text))
    return next((t for t in toks if t in _WH), "")


def _yesno(text: str) -> bool:
    """A yes/no question: opens with an auxiliary ("Did ...", "Can I ...")."""
    toks = contrast_tokens(strip_fillers(text))
    return bool(toks) and toks[0] in _AUX


def is_question(text: str) -> bool:
    """Question-shaped: ends with "?" or opens with a wh-word or an auxiliary ("Can I ...")."""
    toks = contrast_tokens(text)
    return text.rstrip().endswith("?") or bool(toks) and (toks[0] in _WH or toks[0] in _AUX)


def features(stored: str, new: str, cosine: float, verdict: Verdict) -> np.ndarray:
    """The :data:`FEATURES` vector of one candidate (``verdict`` from :func:`guards.explain`)."""
    v = verdict
    total = v.left_a + v.left_b
    share = total / max(v.n_a + v.n_b, 1)
    union = max(v.n_a + v.n_b - v.shared, 1)
    wa, wb = _wh(stored), _wh(new)
    questions = float(is_question(stored) and is_question(new))
    ga, gb = _WH_GROUP.get(wa, wa), _WH_GROUP.get(wb, wb)
    yesno_a, yesno_b = _yesno(stored), _yesno(new)
    return np.array([cosine, total, max(v.left_a, v.left_b), min(v.left_a, v.left_b), share, v.one_sided,
                     v.shared / union, min(v.n_a, v.n_b), max(v.n_a, v.n_b), v.reason == "substitution",
                     v.reason == "contrast", v.reason == "content", cosine * share,
                     float(wa == wb or not wa or not wb), questions, min(v.n_a, v.n_b) / max(v.n_a, v.n_b, 1),
                     max(len(stored.split()), len(new.split())), cosine * questions,
                     float(bool(ga and gb and ga != gb)), float(yesno_a != yesno_b),
                     questions * float(bool(entities(stored) or entities(new)))], dtype=np.float64)


@dataclass(frozen=True)
class LearnedVerifier:
    """Logistic model: ``p = sigmoid(bias + weights · (x - mean) / scale)``; accept when p ≥ the bar:
    ``threshold`` for two question-shaped texts, ``threshold_statements`` otherwise (news-style sentences,
    where the shared MRPC negatives put the bar higher), and ``threshold_contrast`` for two questions the
    contrast verifier refused for a one-sided contrast word ("the *long-term* side effects", "*chronic* knee
    pain"): a word of that kind more often changes what is asked than a reworded verb does."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float
    info: dict[str, Any]
    threshold_statements: float = 1.0
    threshold_contrast: float | None = None  # None: ``threshold``

    def bar(self, x: np.ndarray) -> float:
        """The probability a candidate with features ``x`` needs."""
        if not x[FEATURES.index("questions")]:
            return self.threshold_statements
        if x[FEATURES.index("contrast")] and self.threshold_contrast is not None:
            return max(self.threshold, self.threshold_contrast)
        return self.threshold

    def probability(self, x: np.ndarray) -> float:
        z = self.bias + float(((x - self.mean) / self.scale) @ self.weights)
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))

    def score(self, stored: str, new: str, cosine: float, verdict: Verdict) -> float:
        """Probability that ``new`` asks what ``stored`` asked (only meaningful for soft refusals)."""
        return self.probability(features(stored, new, cosine, verdict))

    def judge(self, stored: str, new: str, cosine: float, verdict: Verdict) -> tuple[float, float]:
        """(probability, the model's bar for this pair)."""
        x = features(stored, new, cosine, verdict)
        return self.probability(x), self.bar(x)

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(FEATURES), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "weights": self.weights.tolist(), "bias": self.bias, "threshold": self.threshold,
                "threshold_statements": self.threshold_statements, "threshold_contrast": self.threshold_contrast,
                "info": self.info}

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "verifier model") -> "LearnedVerifier":
        if not isinstance(d, dict) or d.get("features") != list(FEATURES):
            raise ConfigError(f"{source}: not a verifier model for this version (features differ)",
                              fix="rebuild it: python -m ragbudget.cache.build_verifier")
        try:
            arrs = [np.asarray(d[k], dtype=np.float64) for k in ("mean", "scale", "weights")]
            bias, threshold = float(d["bias"]), float(d["threshold"])
            statements = float(d.get("threshold_statements", threshold))
            contrast = None if d.get("threshold_contrast") is None else float(d["threshold_contrast"])
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"{source}: malformed verifier model ({err})") from None
        if (any(a.shape != (len(FEATURES),) for a in arrs) or not np.all(arrs[1] > 0) or not 0 <= threshold <= 1
                or not 0 <= statements <= 1 or contrast is not None and not 0 <= contrast <= 1):
            raise ConfigError(f"{source}: malformed verifier model (shapes, scales or threshold)")
        return cls(arrs[0], arrs[1], arrs[2], bias, threshold, dict(d.get("info") or {}), statements, contrast)


@lru_cache(maxsize=4)
def load(path: str | None = None) -> LearnedVerifier:
    """The shipped model (or one at ``path``), read once per process."""
    p = Path(path) if path else MODEL_PATH
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read the verifier model {p}: {err}",
                          fix="set cache.semantic.verifier_model to a file built by ragbudget.cache.build_verifier")
    return LearnedVerifier.from_dict(data, str(p))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, sample_weight: Sequence[float] | None = None,
                 iterations: int = 50) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (deterministic); ``x`` already scaled."""
    n, d = x.shape
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    xb = np.hstack([x, np.ones((n, 1))])
    beta = np.zeros(d + 1)
    reg = np.full(d + 1, l2)
    reg[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ beta, -50, 50)))
        grad = xb.T @ (w * (p - y)) + reg * beta
        hess = (xb * (w * p * (1 - p))[:, None]).T @ xb + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    return beta[:-1], float(beta[-1])
