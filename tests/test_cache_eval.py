"""``eval cache`` on a small real MRPC subset: the real semantic layer, hit/false-hit rates, CLI JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ragbudget.cli import cache_cmds
from ragbudget.config import SemanticCacheConfig
from ragbudget.errors import IngestError
from ragbudget.eval.cache_eval import evaluate_pairs, load_pairs


@pytest.fixture(scope="module")
def subset(shared_data: Path, tmp_path_factory) -> Path:
    lines = (shared_data / "eval" / "mrpc_train.tsv").read_text(encoding="utf-8").splitlines()
    out = tmp_path_factory.mktemp("pairs") / "mrpc80.tsv"
    out.write_text("\n".join(lines[:81]) + "\n", encoding="utf-8")
    return out


def test_load_pairs_rejects_bad_files(tmp_path: Path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\n1\tx\ty\n")
    with pytest.raises(IngestError, match="header"):
        load_pairs(bad)
    bad.write_text("label\ttext_a\ttext_b\n7\tx\ty\n")
    with pytest.raises(IngestError, match=":2:"):
        load_pairs(bad)
    with pytest.raises(IngestError, match="not found"):
        load_pairs(tmp_path / "missing.tsv")


def test_rates_follow_threshold_and_guards(subset: Path, embedder):
    pairs = load_pairs(subset)
    assert len(pairs) == 80
    # MRPC news pairs almost never pass the contrast verifier (BENCHMARKS.md, issue 13); the threshold
    # and guard mechanics are checked with the issue-5 guards
    rows = evaluate_pairs(pairs, embedder, SemanticCacheConfig(guard_contrast=False), thresholds=[0.5, 0.8, 0.95, 1.0])
    hits = [r["hit_rate"] for r in rows]
    assert hits == sorted(hits, reverse=True) and hits[0] > 0 and rows[-1]["false_hit_rate"] == 0
    assert rows[0]["positives"] + rows[0]["negatives"] == 80
    (unguarded,) = evaluate_pairs(pairs, embedder, SemanticCacheConfig(guards=False), thresholds=[0.5])
    (verified,) = evaluate_pairs(pairs, embedder, SemanticCacheConfig(), thresholds=[0.5])
    assert verified["false_hit_rate"] <= rows[0]["false_hit_rate"]
    assert unguarded["hit_rate"] > rows[0]["hit_rate"]  # the guards veto some cosine matches
    assert unguarded["false_hit_rate"] > rows[0]["false_hit_rate"]
    assert rows[0]["rejected_by_guard"] > 0 and unguarded["rejected_by_guard"] == 0


def test_cli_json_is_the_last_line(subset: Path, capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=None)
    cache_cmds.add_eval_parser(parser.add_subparsers())
    args = parser.parse_args(["cache", str(subset), "--threshold", "0.85", "--json"])
    assert args.handler(args) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["threshold"] == 0.85 and last["pairs"] == 80
    assert 0 <= last["false_hit_rate"] <= 1 and 0 <= last["hit_rate"] <= 1
    assert set(last) >= {"hit_rate", "false_hit_rate", "pairs", "threshold"}
