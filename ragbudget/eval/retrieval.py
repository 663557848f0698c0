"""Retrieval evaluation on a BEIR-layout folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``.

The corpus is ingested (title + text; a document longer than the chunk size becomes several chunks and
its rank is that of its best chunk), every judged query is run, and nDCG@10, recall@10, recall@100,
MRR@10 and query latency percentiles are reported.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import IngestError
from ..retrieval.search import HybridRetriever
from .ranking import dedupe, mrr_at_k, ndcg_at_k, percentile, recall_at_k

METRIC_KEYS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "queries",
               "latency_ms_p50", "latency_ms_p95", "latency_ms_p99")


@dataclass
class BeirSet:
    folder: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def corpus_path(self) -> Path:
        return self.folder / "corpus.jsonl"


def load_beir(folder: str | Path) -> BeirSet:
    """Queries and judgments of a BEIR folder (the corpus is read by ingest). Only judged queries kept."""
    d = Path(folder).expanduser()
    need = [d / "corpus.jsonl", d / "queries.jsonl", d / "qrels" / "test.tsv"]
    missing = [str(p) for p in need if not p.is_file()]
    if missing:
        raise IngestError(f"not a BEIR folder: missing {', '.join(missing)}",
                          fix="point at a folder with corpus.jsonl, queries.jsonl and qrels/test.tsv")
    qrels: dict[str, dict[str, int]] = {}
    with open(d / "qrels" / "test.tsv", encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t")
        header = next(rows, None)
        if header is None or [h.strip() for h in header[:2]] != ["query-id", "corpus-id"]:
            raise IngestError(f"{d / 'qrels' / 'test.tsv'}: expected header 'query-id corpus-id score'")
        for n, row in enumerate(rows, start=2):
            if not row:
                continue
            try:
                qid, did, score = row[0], row[1], int(row[2])
            except (IndexError, ValueError):
                raise IngestError(f"{d / 'qrels' / 'test.tsv'}:{n}: bad row {row!r}") from None
            if score > 0:
                qrels.setdefault(qid, {})[did] = score
    queries: dict[str, str] = {}
    with open(d / "queries.jsonl", encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rec = json.loads(line)
                    queries[str(rec["_id"])] = str(rec["text"])
                except (json.JSONDecodeError, KeyError) as err:
                    raise IngestError(f"{d / 'queries.jsonl'}:{n}: bad query record ({err})") from None
    judged = {q: t for q, t in queries.items() if q in qrels and t.strip()}
    return BeirSet(folder=d, queries=judged, qrels={q: qrels[q] for q in judged})


def evaluate(retriever: HybridRetriever, beir: BeirSet, mode: str, *, limit_queries: int | None = None,
             depth: int = 100, on_query: Callable[[int, int], None] | None = None) -> dict[str, float]:
    """Run every judged query in ``mode``; return the :data:`METRIC_KEYS` dict."""
    qids = sorted(beir.queries, key=lambda q: (len(q), q))
    if limit_queries:
        qids = qids[:limit_queries]
    sums = {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    lat: list[float] = []
    for i, qid in enumerate(qids):
        t0 = time.perf_counter()
        hits = retriever.retrieve(beir.queries[qid], k=depth, mode=mode)  # type: ignore[arg-type]
        lat.append((time.perf_counter() - t0) * 1000)
        ranked = dedupe([h.chunk.doc_id for h in hits])
        rel = beir.qrels[qid]
        sums["ndcg@10"] += ndcg_at_k(ranked, rel, 10)
        sums["recall@10"] += recall_at_k(ranked, rel, 10)
        sums["recall@100"] += recall_at_k(ranked, rel, 100)
        sums["mrr@10"] += mrr_at_k(ranked, rel, 10)
        if on_query:
            on_query(i + 1, len(qids))
    n = len(qids)
    out: dict[str, float] = {k: round(v / n, 4) if n else 0.0 for k, v in sums.items()}
    out["queries"] = n
    for p in (50, 95, 99):
        out[f"latency_ms_p{p}"] = round(percentile(lat, p), 3)
    return {k: out[k] for k in METRIC_KEYS}
