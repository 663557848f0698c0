"""Traffic files and the synthetic generator, on real SQuAD questions and MRPC pairs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ragbudget.cli import main
from ragbudget.errors import IngestError
from ragbudget.eval.traffic import (generate, history_for, load_pairs, load_questions, load_traffic, paraphrase,
                                    parse_lines, save_traffic)


@pytest.fixture(scope="module")
def squad_questions(shared_data: Path) -> list[str]:
    return load_questions(shared_data / "eval" / "squad2")


def test_generate_rates_and_roundtrip(squad_questions: list[str], tmp_path: Path) -> None:
    recs = generate(squad_questions, 400, rate=5.0, repeat=0.3, paraphrase_rate=0.2, seed=3,
                    tenants=("a", "b"), batch_share=0.1, history_max=3, max_tokens=64)
    kinds = [r.kind for r in recs]
    assert 0.22 < kinds.count("repeat") / 400 < 0.38
    assert 0.13 < kinds.count("paraphrase") / 400 < 0.27
    gaps = [b.t - a.t for a, b in zip(recs, recs[1:])]
    assert all(g >= 0 for g in gaps)
    assert abs(sum(gaps) / len(gaps) - 0.2) < 0.03  # Poisson mean inter-arrival 1/rate
    fresh = [r.question for r in recs if r.kind == "fresh"]
    assert len(set(fresh)) == len(fresh) and set(fresh) <= set(squad_questions)
    assert all(r.question in fresh for r in recs if r.kind == "repeat")
    assert all(r.question not in squad_questions for r in recs if r.kind == "paraphrase")
    assert {r.tenant for r in recs} == {"a", "b"} and any(r.priority == "batch" for r in recs)
    path = tmp_path / "t.jsonl"
    save_traffic(recs, path)
    assert load_traffic(path) == recs
    assert generate(squad_questions, 50, seed=3) == generate(squad_questions, 50, seed=3)


def test_paraphrases_keep_words() -> None:
    rng = random.Random(0)
    q = "What pathway plays a role in immune response to viruses?"
    outs = {paraphrase(q, rng) for _ in range(50)}
    assert q not in outs and len(outs) >= 4
    assert all("immune response to viruses" in o for o in outs)


def test_mrpc_pairs_as_paraphrases(shared_data: Path) -> None:
    pairs = load_pairs(shared_data / "eval" / "mrpc_train.tsv")
    assert len(pairs) > 2000
    recs = generate([], 300, pairs=pairs[:100], repeat=0.0, paraphrase_rate=0.5, seed=1)
    twin = dict(pairs[:100])
    for r in recs:
        if r.kind == "paraphrase":
            assert r.question in twin.values()


def test_rate_line_and_bad_lines() -> None:
    recs = parse_lines(['{"rate": 4}', '{"question": "a?"}', '{"question": "b?", "tenant": "x"}'])
    assert [r.t for r in recs] == [0.0, 0.25] and recs[1].tenant == "x"
    with pytest.raises(IngestError, match="no rate"):
        parse_lines(['{"question": "a?"}'])
    for bad, msg in [('{"t": -1, "question": "a"}', "'t'"), ('{"t": 0}', "question"),
                     ('{"t": 0, "question": "a", "priority": "vip"}', "priority"),
                     ('{"t": 0, "question": "a", "colour": 1}', "unknown"), ("not json", "not JSON"),
                     ('{"t": 0, "question": "a", "history_len": -2}', "history_len")]:
        with pytest.raises(IngestError, match=msg):
            parse_lines([bad], "x.jsonl")
    with pytest.raises(IngestError, match="repeat"):
        generate(["q"], 5, repeat=0.8, paraphrase_rate=0.5)


def test_history_for() -> None:
    recs = parse_lines([json.dumps({"t": i, "question": f"q{i}", "history_len": h})
                        for i, h in enumerate([0, 0, 2, 5])])
    assert history_for(recs, 0) == []
    h = history_for(recs, 2)
    assert [m.content for m in h if m.role == "user"] == ["q0", "q1"]
    assert len([m for m in history_for(recs, 3) if m.role == "user"]) == 5


def test_bench_traffic_command(shared_data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["bench", "traffic", str(shared_data / "eval" / "cranfield"), "--out", str(out), "--n", "30",
                 "--rate", "10", "--repeat", "0.3", "--paraphrase", "0.2", "--seed", "1"]) == 0
    recs = load_traffic(out)
    assert len(recs) == 30 and "wrote 30 requests" in capsys.readouterr().out
    assert main(["bench", "traffic", str(tmp_path / "missing"), "--out", str(out)]) == 1
