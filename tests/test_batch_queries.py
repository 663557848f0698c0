"""Batch runner: strict input validation, torn-line repair, resume after a crash (real RAG)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbudget.service.batch_queries import done_ids, parse_lines, run_batch
from ragbudget.errors import QueryError

QUESTIONS = ["lift increase due to slipstream", "boundary layer transition on a flat plate",
             "heat transfer at hypersonic speed", "buckling of thin cylindrical shells",
             "pressure distribution on a cone"]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("text,match", [
    ('{"id": "a", "question": "x"}\n{not json}\n', "line 2: not valid JSON"),
    ('{"id": "a", "question": "x"}\n{"id": "a", "question": "y"}\n', "duplicate id"),
    ('{"id": "a", "question": ""}\n', "question"),
    ('{"question": "x"}\n', "'id'"),
    ('{"id": "a", "question": "x", "colour": 1}\n', "unknown field"),
    ('{"id": "a", "question": "x", "history": [{"role": "bot", "content": "y"}]}\n', "history"),
    ('{"id": "a", "question": "x", "max_tokens": -3}\n', "max_tokens"),
    ('[1, 2]\n', "JSON object"),
])
def test_bad_lines_refuse_the_whole_file(text, match):
    with pytest.raises(QueryError, match=match):
        parse_lines(text.splitlines(), "in.jsonl")


def test_done_ids_cuts_a_torn_last_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"id": "a", "ok": true}\n{"id": "b", "ok": false}\n{"id": "c", "ok": tr')
    assert done_ids(out) == {"a"}  # b failed (retried on resume), c was torn
    assert out.read_bytes().endswith(b'"ok": false}\n')


def test_run_batch_answers_and_resumes(cranfield_rag, tmp_path):  # noqa: F811
    rows = [{"id": f"q{i}", "question": q} for i, q in enumerate(QUESTIONS)]
    inp, out = _write(tmp_path / "in.jsonl", rows[:3]), tmp_path / "out.jsonl"
    seen: list[tuple[int, int]] = []
    rep = run_batch(cranfield_rag, inp, out, lambda d, t: seen.append((d, t)))
    assert (rep.total, rep.answered, rep.skipped, rep.failed) == (3, 3, 0, 0)
    assert seen[-1] == (3, 3)
    first = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in first] == ["q0", "q1", "q2"] and all(r["ok"] and r["answer"] for r in first)
    # crash mid-write of a 4th answer, then the input grows to 5: resume answers only q3, q4
    with out.open("a") as fh:
        fh.write('{"id": "q3", "ok": true, "answer": "half')
    _write(inp, rows)
    rep2 = run_batch(cranfield_rag, inp, out)
    assert (rep2.answered, rep2.skipped) == (2, 3)
    final = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in final] == ["q0", "q1", "q2", "q3", "q4"]
    assert final[:3] == first  # earlier lines untouched


def test_run_batch_records_per_query_errors(cranfield_rag, tmp_path):  # noqa: F811
    inp = _write(tmp_path / "in.jsonl", [{"id": "ok", "question": QUESTIONS[0]},
                                         {"id": "bad", "question": QUESTIONS[1], "index": "no-such-index"}])
    rep = run_batch(cranfield_rag, inp, tmp_path / "out.jsonl")
    assert (rep.answered, rep.failed) == (1, 1)
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert recs["bad"]["ok"] is False and recs["bad"]["error"]["type"] == "IndexNotFoundError"
