"""Long documents from short paragraphs, for answer-in-context evaluation where one chunk ≠ one document.

SQuAD-style sets hold one short paragraph per record, so a retriever that finds the right record has
also found the answer: tuning on them cannot teach what happens inside a long article. This module
concatenates the paragraphs of an answers folder (DESIGN.md "answers") into documents of about
``tokens`` tokens and writes a new answers folder; the questions and answers are unchanged, and every
answer still occurs in the corpus (it is checked).

Two groupings:

- ``topic``: paragraphs clustered by their embedding (k-means over MiniLM vectors, fixed seed), each
  cluster packed in its original order into documents — like a Wikipedia article, the distracting
  paragraphs of a document are about the same subject as the answer;
- ``random``: paragraphs shuffled with a fixed seed and packed in that order — a mixed-topic document.

    ragbudget eval longdocs ../shared/data/eval/squad2 /tmp/squad2-long --tokens 3000 --group topic
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..embed.encoder import Embedder
from ..errors import IngestError
from ..kernels.tokens import Tokenizer
from .answers import load_questions

GROUPS = ("topic", "random")


def _read(folder: Path) -> list[dict[str, Any]]:
    path = folder / "corpus.jsonl"
    if not path.is_file():
        raise IngestError(f"{folder} has no corpus.jsonl", fix="point at an answers folder (DESIGN.md)")
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if isinstance(rec.get("text"), str) and rec["text"].strip():
                    out.append(rec)
    return out


def _clusters(vectors: np.ndarray, n: int, seed: int) -> list[int]:
    import faiss  # the index's own dependency; k-means with a fixed seed is deterministic

    n = max(1, min(n, len(vectors)))
    km = faiss.Kmeans(vectors.shape[1], n, niter=25, seed=seed, verbose=False, min_points_per_centroid=1)
    km.train(np.ascontiguousarray(vectors, dtype=np.float32))
    _, assign = km.index.search(np.ascontiguousarray(vectors, dtype=np.float32), 1)
    return [int(a) for a in assign[:, 0]]


def _pack(order: Sequence[int], counts: Sequence[int], tokens: int) -> list[list[int]]:
    docs: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i in order:
        if cur and size + counts[i] > tokens:
            docs.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += counts[i]
    if cur:
        docs.append(cur)
    return docs


def build_long_documents(src: str | Path, out: str | Path, *, tokens: int = 3000, group: str = "topic",
                         embedder: Embedder | None = None, tokenizer: Tokenizer | None = None,
                         seed: int = 7) -> dict[str, Any]:
    """Write ``out/corpus.jsonl`` (long documents) and ``out/questions.jsonl`` (copied). Returns a summary."""
    if group not in GROUPS:
        raise IngestError(f"unknown grouping {group!r}", fix=f"use one of {GROUPS}")
    if tokens < 100:
        raise IngestError(f"--tokens {tokens} is too small for a long document", fix="use e.g. 3000")
    src, out = Path(src), Path(out)
    questions = load_questions(src)
    paras = _read(src)
    if not paras:
        raise IngestError(f"{src}/corpus.jsonl has no paragraphs")
    tok = tokenizer or Tokenizer()
    texts = [p["text"].strip() for p in paras]
    counts = [tok.count(t) + 2 for t in texts]
    if group == "topic":
        if embedder is None:
            raise IngestError("grouping by topic needs an embedder", fix="pass embedder= or use group='random'")
        # Half as many clusters as documents: a cluster fills about two documents, so few end up short.
        n_clusters = max(1, round(sum(counts) / tokens / 2))
        assign = _clusters(np.asarray(embedder.embed(texts), dtype=np.float32), n_clusters, seed)
        order = sorted(range(len(texts)), key=lambda i: (assign[i], i))
        docs = [d for c in sorted(set(assign)) for d in _pack([i for i in order if assign[i] == c], counts, tokens)]
    else:
        order = list(range(len(texts)))
        random.Random(seed).shuffle(order)
        docs = _pack(order, counts, tokens)
    out.mkdir(parents=True, exist_ok=True)
    corpus = [{"_id": f"long{n}", "title": "", "text": "\n\n".join(texts[i] for i in d)} for n, d in enumerate(docs)]
    joined = "\n".join(r["text"] for r in corpus).lower()
    missing = [q["id"] for q in questions if not any(a.lower() in joined for a in q["answers"])]
    if missing:
        raise IngestError(f"{len(missing)} questions lost their answers while packing (e.g. {missing[:3]})")
    tmp = out / "corpus.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        for r in corpus:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(out / "corpus.jsonl")
    (out / "questions.jsonl").write_text((src / "questions.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    sizes = [sum(counts[i] for i in d) for d in docs]
    return {"documents": len(docs), "paragraphs": len(texts), "questions": len(questions), "group": group,
            "tokens_mean": round(float(np.mean(sizes)), 1), "tokens_max": int(max(sizes)), "out": str(out)}


__all__ = ["GROUPS", "build_long_documents"]
