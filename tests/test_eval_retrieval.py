"""Ranking metrics against hand-computed values; BEIR reader; CLI ingest/search/eval end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragbudget.cli import main
from ragbudget.errors import IngestError
from ragbudget.eval.ranking import dedupe, mrr_at_k, ndcg_at_k, percentile, recall_at_k
from ragbudget.eval.retrieval import METRIC_KEYS, load_beir

from fixtures_retrieval import cranfield_subset, write_beir


def test_ndcg_hand_computed() -> None:
    rel = {"a": 1, "b": 1, "c": 1}
    # relevant at ranks 1 and 3: DCG = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) + 1/2
    expect = 1.5 / (1 + 1 / math.log2(3) + 0.5)
    assert abs(ndcg_at_k(["a", "x", "b", "y"], rel, 10) - expect) < 1e-12
    assert ndcg_at_k(["a", "b", "c"], rel) == 1.0
    assert ndcg_at_k(["x", "y"], rel) == 0.0 and ndcg_at_k(["a"], {}) == 0.0
    graded = {"a": 2, "b": 1}
    assert abs(ndcg_at_k(["b", "a"], graded) - (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))) < 1e-12
    # cut-off: a relevant doc at rank 11 does not count for @10
    assert ndcg_at_k([f"x{i}" for i in range(10)] + ["a"], {"a": 1}, 10) == 0.0


def test_recall_mrr_percentile_dedupe() -> None:
    rel = {"a": 1, "b": 1, "c": 1, "z": 0}
    ranked = ["x", "b", "y", "a"]
    assert recall_at_k(ranked, rel, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, rel, 10) == pytest.approx(2 / 3)
    assert mrr_at_k(ranked, rel, 10) == 0.5 and mrr_at_k(ranked, rel, 1) == 0.0
    assert mrr_at_k(["z", "a"], rel) == 0.5  # gain 0 is not relevant
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([], 99) == 0.0
    assert dedupe(["d1", "d2", "d1", "d3"]) == ["d1", "d2", "d3"]


def test_load_beir_keeps_judged_queries_and_rejects_bad_folders(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "b", [{"_id": "1", "title": "", "text": "x"}],
                        [{"_id": "q1", "text": "x?"}, {"_id": "q2", "text": "unjudged"}], [("q1", "1", 1)])
    beir = load_beir(folder)
    assert beir.queries == {"q1": "x?"} and beir.qrels == {"q1": {"1": 1}}
    with pytest.raises(IngestError, match="not a BEIR folder"):
        load_beir(tmp_path)


def test_cli_ingest_search_and_eval_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, queries, qrels = cranfield_subset(100)
    beir = write_beir(tmp_path / "cran", docs, queries, qrels)
    idx_dir = str(tmp_path / "indexes")
    assert main(["ingest", str(beir / "corpus.jsonl"), "--index", "cran", "--index-dir", idx_dir, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "chunks added" in out and "records read" in out and "100" in out

    assert main(["search", docs[3]["title"], "--index", "cran", "--index-dir", idx_dir, "-k", "3",
                 "--mode", "bm25", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["results"][0]["doc_id"] == docs[3]["_id"] and len(res["results"]) == 3
    # loading the model is reported apart from the query's stages (not as "embed")
    assert main(["search", docs[3]["title"], "--index", "cran", "--index-dir", idx_dir, "-k", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert isinstance(res["load_ms"], float) and "load" not in res["timings_ms"] and "embed" in res["timings_ms"]

    assert main(["search", "x", "--index", "missing", "--index-dir", idx_dir]) == 1
    assert "cran" in capsys.readouterr().err

    # the eval re-uses the embedding cache the ingest filled (same index dir), so only queries are embedded
    assert main(["eval", "retrieval", str(beir), "--json", "--index-dir", idx_dir, "--limit-queries", "20"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(metrics) == list(METRIC_KEYS) and metrics["queries"] == 20
    assert 0.2 < metrics["ndcg@10"] <= 1.0 and metrics["recall@100"] >= metrics["recall@10"]
    assert metrics["latency_ms_p50"] <= metrics["latency_ms_p99"]
