"""Build ``data/verifier.json``, the learned near-miss verifier (:mod:`~ragbudget.cache.verifier`).

    python -m ragbudget.cache.build_verifier --floor 0.76 --margin 0.5 --margin-questions 1.5 \\
        --pairs tests/data/question_pairs.tsv:3 --pairs tests/data/question_pairs_extra.tsv:3 \\
        --pairs tests/data/near_miss_pairs.tsv:2 --pairs /tmp/mined.tsv:0.3:free \\
        --pairs ../shared/data/eval/mrpc_train.tsv:0.3

Each ``--pairs PATH:WEIGHT`` is a pairs TSV (``label text_a text_b [kind split]``); only its tuning half is
read (rows whose split is ``tune``; a file without a split column: even rows), so the other half stays
held out. Question-shaped sets carry more weight than MRPC's news sentences (a cache answers questions).
Rows are embedded with the bundled MiniLM, checked by the default guards, and the model is fit on the
soft refusals (see :class:`~ragbudget.cache.contrast.Verdict`) at cosine ≥ ``--floor``. The bars are chosen
on validation, not on the fit: each tune row is scored by a model fit without its fold (``--folds``), and
each bar — one for question pairs, one for other sentences — is the smallest probability at which the
label-0 pairs of that kind in the sets not marked ``:free`` (noisy labels), pooled, gain at most
``--margin`` × ``--max-false`` false hits (``--margin-questions`` for question pairs, whose pooled
negatives are few) beyond those the lexical verifier already makes. A third bar, for question pairs
refused for a one-sided contrast word (polar, degree or class: "the *long-term* side effects"), starts at
the question bar and rises until no such label-0 pair is served out of fold. The shipped model is then fit
on all tune rows.
Deterministic: Newton's method from zeros, sorted inputs, no sampling.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ..config import EmbeddingConfig, SemanticCacheConfig
from ..embed.encoder import SentenceTransformerEmbedder
from ..errors import ConfigError
from . import guards, verifier


def _read(path: Path) -> list[tuple[int, str, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    if header[:3] != ["label", "text_a", "text_b"]:
        raise ConfigError(f"{path}: expected the header 'label<TAB>text_a<TAB>text_b'")
    split_col = header.index("split") if "split" in header else None
    rows = []
    for n, line in enumerate(lines[1:]):
        cols = line.split("\t")
        if len(cols) < 3:
            continue
        tune = cols[split_col] == "tune" if split_col is not None and len(cols) > split_col else n % 2 == 0
        if tune:
            rows.append((int(cols[0]), cols[1], cols[2]))
    return rows


def _fit(xs: list[np.ndarray], ys: list[float], ws: list[float], l2: float) -> verifier.LearnedVerifier:
    x = np.array(xs)
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    weights, bias = verifier.fit_logistic((x - mean) / scale, np.array(ys), l2=l2, sample_weight=ws)
    return verifier.LearnedVerifier(mean, scale, weights, bias, 1.0, {})


def build(sets: list[tuple[Path, float, bool]], floor: float, max_false: float, l2: float = 1.0,
          folds: int = 5, margin: float = 0.5, margin_questions: float = 1.5) -> dict:
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False))
    gs = guards.GuardSettings()
    scored: list[tuple[int, int, bool, np.ndarray | None, float]] = []  # (set, label, lexical_ok, features, weight)
    names = []
    kinds: list[bool] = []  # both texts question-shaped (the regime whose bar applies)
    contrasts: list[bool] = []  # ... and refused for a one-sided contrast word (its own bar)
    for s_i, (path, weight, bound) in enumerate(sets):
        rows = _read(path)
        va = emb.embed([r[1] for r in rows])
        vb = emb.embed([r[2] for r in rows])
        cos = np.sum(va * vb, axis=1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
        for (label, a, b), c in zip(rows, cos):
            v = guards.explain(a, b, gs)
            x = verifier.features(a, b, float(c), v) if c >= floor and v.reason is not None and not v.hard else None
            scored.append((s_i, label, bool(c >= floor and v.reason is None), x, weight))
            kinds.append(verifier.is_question(a) and verifier.is_question(b))
            contrasts.append(kinds[-1] and v.reason == "contrast" and not v.hard)
        names.append(path.name)
    soft = [i for i, r in enumerate(scored) if r[3] is not None]
    # out-of-fold probabilities: each soft row scored by a model fit without its fold (validation for the bars)
    oof: dict[int, float] = {}
    for k in range(folds):
        fit_rows = [i for j, i in enumerate(soft) if j % folds != k]
        model = _fit([scored[i][3] for i in fit_rows], [float(scored[i][1]) for i in fit_rows],  # type: ignore[misc]
                     [scored[i][4] for i in fit_rows], l2)
        oof.update({i: model.probability(scored[i][3]) for j, i in enumerate(soft) if j % folds == k})  # type: ignore[arg-type]

    def extra_false(questions: bool, thr: float, probs: dict[int, float]) -> float:
        """False hits the learned verifier adds among the bounding sets' label-0 pairs of one regime
        (question pairs or other sentences), pooled: one small set cannot veto a bar on one pair."""
        neg = [i for i, r in enumerate(scored) if sets[r[0]][2] and r[1] == 0 and kinds[i] == questions]
        added = sum(1 for i in neg if i in probs and probs[i] >= thr)
        return added / max(len(neg), 1)

    grid = np.round(np.arange(0.50, 1.0, 0.01), 2)  # the bars' candidates

    def bar(questions: bool) -> float:
        m = margin_questions if questions else margin
        return float(next((t for t in grid if extra_false(questions, t, oof) <= m * max_false), 0.99))

    def contrast_bar(start: float) -> float:
        """The one-sided-contrast questions' bar: the smallest from ``start`` at which none of the bounding
        sets' label-0 pairs of that kind is served out of fold (they are few: one would exceed any share)."""
        neg = [i for i, r in enumerate(scored) if sets[r[0]][2] and r[1] == 0 and contrasts[i] and i in oof]
        return float(next((t for t in grid if t >= start and not any(oof[i] >= t for i in neg)), 0.99))

    model = _fit([scored[i][3] for i in soft], [float(scored[i][1]) for i in soft],  # type: ignore[misc]
                 [scored[i][4] for i in soft], l2)
    t_q, t_s = bar(True), bar(False)
    t_c = contrast_bar(t_q)
    full = {i: model.probability(scored[i][3]) for i in soft}  # type: ignore[arg-type]

    def rates(probs: dict[int, float]) -> dict[str, dict[str, float]]:
        out = {}
        for s_i, name in enumerate(names):
            r = {}
            for label in (1, 0):
                rows = [i for i, x in enumerate(scored) if x[0] == s_i and x[1] == label]
                if rows:
                    hit = sum(1 for i in rows if scored[i][2] or (
                        i in probs and probs[i] >= ((t_c if contrasts[i] else t_q) if kinds[i] else t_s)))
                    r["hit_rate" if label else "false_hit_rate"] = round(hit / len(rows), 4)
            out[name] = r
        return out

    info = {"built_from": [f"{p.name} (tune half, weight {w}{'' if b else ', not bounding'})" for p, w, b in sets],
            "floor": floor, "max_false": max_false, "margin": margin, "margin_questions": margin_questions, "folds": folds, "rows": len(soft),
            "positives": int(sum(scored[i][1] for i in soft)),
            "out_of_fold_at_bars": rates(oof), "fit_at_bars": rates(full)}
    return verifier.LearnedVerifier(model.mean, model.scale, model.weights, model.bias, t_q, info, t_s, t_c).to_dict()


def _pair_arg(text: str) -> tuple[Path, float, bool]:
    bound = not text.endswith(":free")
    path, _, weight = text.removesuffix(":free").rpartition(":")
    try:
        w = float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PATH:WEIGHT[:free], got {text!r}") from None
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"pairs file not found: {path}")
    return Path(path), w, bound


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=_pair_arg, action="append", required=True, help="PATH:WEIGHT (repeat)")
    ap.add_argument("--floor", type=float, default=SemanticCacheConfig().threshold, help="cosine floor")
    ap.add_argument("--max-false", type=float, default=0.01)
    ap.add_argument("--margin", type=float, default=0.5,
                    help="the bar for other sentences keeps added false hits under margin × max-false")
    ap.add_argument("--margin-questions", type=float, default=1.5,
                    help="the same for question pairs (their pooled negatives are ~200: 1.5%% is three pairs; "
                         "at 1%% one tune pair moves the bar by 0.1)")
    ap.add_argument("--out", default=str(verifier.MODEL_PATH))
    args = ap.parse_args(argv)
    model = build(args.pairs, args.floor, args.max_false, margin=args.margin,
                  margin_questions=args.margin_questions)
    Path(args.out).write_text(json.dumps(model, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({**{k: model[k] for k in ("threshold", "threshold_statements", "threshold_contrast")},
                      **model["info"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
