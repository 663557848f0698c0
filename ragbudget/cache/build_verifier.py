"""Build ``data/verifier.json``, the learned near-miss verifier (:mod:`~ragbudget.cache.verifier`).

    python -m ragbudget.cache.build_verifier \\
        --pairs tests/data/question_pairs.tsv:3 --pairs tests/data/near_miss_pairs.tsv:2 \\
        --pairs /tmp/mined_questions.tsv:0.3:free --pairs ../shared/data/eval/mrpc_train.tsv:0.1

Each ``--pairs PATH:WEIGHT`` is a pairs TSV (``label text_a text_b [kind split]``); only its tuning half is
read (rows whose split is ``tune``; a file without a split column: even rows), so the other half stays
held out. Question-shaped sets carry more weight than MRPC's news sentences (a cache answers questions).
Rows are embedded with the bundled MiniLM, checked by the default guards, and the model is fit on the
soft refusals (see :class:`~ragbudget.cache.contrast.Verdict`) at cosine ≥ ``--floor``. The threshold is
the smallest probability at which every set not marked ``:free`` (noisy labels) adds at most ``--max-false`` false hits
(over all its label-0 rows) to those the lexical verifier already makes.
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


def build(sets: list[tuple[Path, float, bool]], floor: float, max_false: float, l2: float = 1.0) -> dict:
    emb = SentenceTransformerEmbedder(EmbeddingConfig(cache=False))
    gs = guards.GuardSettings()
    xs, ys, ws = [], [], []
    per_set = []  # (weight, [(label, lexical_ok, soft_features or None)])
    for path, weight, bound in sets:
        rows = _read(path)
        va = emb.embed([r[1] for r in rows])
        vb = emb.embed([r[2] for r in rows])
        cos = np.sum(va * vb, axis=1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
        scored = []
        for (label, a, b), c in zip(rows, cos):
            v = guards.explain(a, b, gs)
            x = verifier.features(a, b, float(c), v) if c >= floor and v.reason is not None and not v.hard else None
            scored.append((label, bool(c >= floor and v.reason is None), x))
            if x is not None:
                xs.append(x)
                ys.append(float(label))
                ws.append(weight)
        per_set.append((path.name, bound, scored))
    x = np.array(xs)
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    weights, bias = verifier.fit_logistic((x - mean) / scale, np.array(ys), l2=l2, sample_weight=ws)
    model = verifier.LearnedVerifier(mean, scale, weights, bias, 1.0, {})

    def false_rate(scored: list, thr: float) -> float:
        neg = [(ok, f) for label, ok, f in scored if label == 0]
        if not neg:
            return 0.0
        return sum(ok or (f is not None and model.probability(f) >= thr) for ok, f in neg) / len(neg)

    threshold = next((t for t in np.round(np.arange(0.50, 1.0, 0.01), 2)
                      if all(false_rate(s, t) - false_rate(s, 2.0) <= max_false for _, b, s in per_set if b)), 0.99)
    info = {"built_from": [f"{p.name} (tune half, weight {w}{'' if b else ', not bounding'})" for p, w, b in sets], "floor": floor,
            "max_false": max_false, "rows": len(ys), "positives": int(sum(ys)),
            "false_rate_at_threshold": {name: round(false_rate(s, threshold), 4) for name, _, s in per_set}}
    return verifier.LearnedVerifier(mean, scale, weights, bias, float(threshold), info).to_dict()


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
    ap.add_argument("--out", default=str(verifier.MODEL_PATH))
    args = ap.parse_args(argv)
    model = build(args.pairs, args.floor, args.max_false)
    Path(args.out).write_text(json.dumps(model, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"threshold": model["threshold"], **model["info"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
