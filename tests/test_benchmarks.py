"""The project's benchmark scripts in benchmarks/ (moved out of ragbudget/eval, issue 14).

Each script answers ``--help`` with its options; one runs as a script from the repo root with no
PYTHONPATH; the old ``ragbudget bench headline|microbatch`` and ``ragbudget eval generation`` say where the
benchmark went; and the cheap parts of the scripts run for real on small subsets of the shared data.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # the scripts import their helpers (_common, _baseline) by name
import cache_lookup  # noqa: E402
import cold_ingest  # noqa: E402
import headline  # noqa: E402
import loadtest  # noqa: E402
import microbatch  # noqa: E402
import pipeline_latency  # noqa: E402
import real_headline  # noqa: E402
import retrieval_modes  # noqa: E402

from ragbudget.cache import MemoryBackend  # noqa: E402
from ragbudget.cli import main  # noqa: E402

# Each moved script and options it must keep (those the removed CLI command offered, and --data where the
# script reads the shared data sets by default).
SCRIPTS = {
    "headline": ["--squad-limit", "--cranfield-pipeline", "--ttft", "--replay", "--threads", "--config", "--json",
                 "--write", "--data"],
    "microbatch": ["--requests", "--concurrency", "--wait", "--rounds", "--max-batch", "--json", "--data"],
    "loadtest": ["--docs", "--duration", "--slots", "--server-cpus", "--client-cpus", "--json", "--data"],
    "pipeline_latency": ["folder", "--n", "--modes", "--count-cache", "--gc"],
    "generation": ["--layers", "--dim", "--requests", "--reps", "--threads", "--only", "--snippet-chars",
                   "--static-tokens", "--data"],
    "cache_lookup": ["--redis-url", "-n"],
    "retrieval_modes": ["folders", "--config", "--json"],
    "cold_ingest": ["before", "after", "data", "--rounds", "--only"],
    "real_headline": ["--n", "--sets", "--n-ctx", "--threads", "--data", "--offset", "--variant", "--no-baseline",
                      "--work", "--json", "--write"],
    "llamacpp_threads": ["--tokens", "--rounds", "--threads", "--load"],
    "context_variants": ["--sets", "--n", "--data", "--work", "--offset", "--variant"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_help_lists_its_options(name: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(name).main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    missing = [o for o in SCRIPTS[name] if o not in out]
    assert not missing, f"benchmarks/{name}.py --help lacks {missing}"


def test_no_benchmark_left_in_the_package() -> None:
    gone = ["headline", "microbatch_bench", "loadtest", "pipeline_bench", "bench_generation", "cache_bench",
            "retrieval_bench", "baseline"]
    assert not [n for n in gone if (REPO / "ragbudget" / "eval" / f"{n}.py").exists()]
    for name in SCRIPTS:  # and no script reads data from beside the package
        assert "parents[2]" not in (REPO / "benchmarks" / f"{name}.py").read_text(encoding="utf-8")


def test_a_script_runs_from_the_repo_root_without_pythonpath(shared_data: Path) -> None:
    """``python benchmarks/generation.py --only routing``: the script finds this checkout's ragbudget and
    ../shared/data from the repository root, whatever PYTHONPATH says."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "benchmarks/generation.py", "--only", "routing"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "### Routing" in r.stdout and "95 requests: 60 SQuAD questions" in r.stdout
    rows = {line.split("|")[1].strip(): int(line.split("|")[2]) for line in r.stdout.splitlines()
            if line.startswith(("| handler", "| small", "| large"))}
    assert sum(rows.values()) == 95 and rows["handler"] >= 15  # 10 handler questions and 5 FAQ hits
    assert "of always-large" in r.stdout


def test_missing_data_is_a_clear_exit(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        headline.main(["--data", str(tmp_path)])
    assert "data not found" in str(exit_.value.code) and "squad2" in str(exit_.value.code)


@pytest.mark.parametrize("argv, script", [
    (["bench", "headline", "--squad-limit", "3", "--write", "BENCHMARKS.md"], "benchmarks/headline.py"),
    (["bench", "headline", "--help"], "benchmarks/headline.py"),
    (["bench", "microbatch", "--rounds", "2"], "benchmarks/microbatch.py"),
    (["eval", "generation", "--only", "routing"], "benchmarks/generation.py"),
])
def test_moved_commands_name_the_new_command(argv: list[str], script: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"`ragbudget {argv[0]} {argv[1]}` moved out of the package" in err
    assert f"`.venv/bin/python {script}`" in err


def test_bench_and_eval_help_list_only_package_commands(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert all(k in out for k in ("replay", "traffic", "compare")) and "headline" not in out and "microbatch" not in out
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    assert "answers" in out and "generation" not in out


# ------------------------------------------------------------------------------- the scripts' own parts


def _result() -> dict:
    side = {"queries": 5, "context_tokens_mean": 100.0, "section_tokens_mean": 120.0, "answer_in_context": 0.8,
            "overhead_p50_ms": 10.0, "overhead_p99_ms": 20.0, "overhead_over_search_p50": 1.2, "ndcg@10": 0.5}
    li = {**side, "context_tokens_mean": 200.0, "answer_in_context": 0.4, "ndcg@10": 0.25}
    return {"squad2": {"ragbudget": side, "llamaindex": li}, "cranfield": {"ragbudget": side, "llamaindex": li},
            "ttft": None, "cache": None}


def test_headline_table_and_section(tmp_path: Path) -> None:
    table = headline.markdown(_result())
    assert "| SQuAD2 context tokens / query (joined text) | 100.0 | 200.0 | 0.50× |" in table
    assert "| SQuAD2 answer-in-context (5 q) | 0.8 | 0.4 | 2.00× |" in table
    assert "TTFT" not in table  # a skipped section leaves no row
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"# Benchmarks\n\nintro\n\n## Headline\n\n{headline.START}\nold table\n{headline.END}\n\n"
                   "## Other\n\nkept\n", encoding="utf-8")
    headline.write_section(doc, table, ".venv/bin/python benchmarks/headline.py --ttft 0", "2026-12-04")
    text = doc.read_text(encoding="utf-8")
    assert "old table" not in text and table in text and text.endswith("## Other\n\nkept\n")
    assert "Command: `.venv/bin/python benchmarks/headline.py --ttft 0` · date 2026-12-04 · data " \
           "../shared/data/eval/{squad2,cranfield}" in text
    fresh = tmp_path / "NEW.md"
    fresh.write_text("# Benchmarks\n\nintro\n\n## Retrieval\n", encoding="utf-8")
    headline.write_section(fresh, table, "cmd", "d", "/data")
    text = fresh.read_text(encoding="utf-8")
    assert text.index("## Headline") < text.index("## Retrieval") and "data /data/{squad2,cranfield}" in text


def test_loadtest_cpu_lists_and_summary() -> None:
    assert loadtest.cpu_set(None) is None
    first = min(os.sched_getaffinity(0))
    assert loadtest.cpu_set(str(first)) == {first} and loadtest.cpu_set(f"{first}-{first}") == {first}
    with pytest.raises(SystemExit, match="bad CPU list"):
        loadtest.cpu_set("x")
    with pytest.raises(SystemExit, match="cannot use"):
        loadtest.cpu_set("100000")
    phase = loadtest.Phase("p", 10.0, 2.0, [loadtest.Result(200, 10.0, 20.0, 0, 1.0), loadtest.Result(200, 30.0, 40.0, 1, 5.0),
                                           loadtest.Result(429, None, 2.0)])
    s = phase.summary()
    assert (s["sent"], s["ok"], s["rejected_429"], s["other_errors"]) == (3, 2, 1, 0)
    assert s["throughput_rps"] == 1.0 and s["max_degrade_level"] == 1 and s["service_p50_ms"] == 17.0
    table = loadtest.markdown({"phases": [s]})
    assert table.splitlines()[2].startswith("| p | 10.0 | 3 | 2 | 1 | 0 | 1.0 |")


def test_microbatch_closed_loop(shared_data: Path) -> None:
    lat, wall = microbatch.run_cell(lambda t: time.sleep(0.002), [str(i) for i in range(20)], 4)
    assert len(lat) == 20 and min(lat) >= 2.0 and wall < sum(lat) / 1000  # 4 threads overlap
    rows = microbatch.run(8, [1, 2], [0.0], 4, rounds=1, data=shared_data / "eval")
    assert [(r["concurrency"], r["mode"]) for r in rows] == [(1, "unbatched"), (1, "batched wait=0ms"),
                                                               (2, "unbatched"), (2, "batched wait=0ms")]
    assert all(r["p50_ms"] > 0 and r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] for r in rows)
    assert "| 1 | unbatched |" in microbatch.markdown(rows)


@pytest.fixture(scope="module")
def small_data(shared_data: Path, tmp_path_factory) -> Path:
    """SQuAD2 (30 paragraphs, the questions they answer) and Cranfield (40 abstracts, the queries judged on
    them) subsets, in the layouts the scripts read."""
    src, out = shared_data / "eval", tmp_path_factory.mktemp("bench-data")
    lines = (src / "squad2" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:30]
    texts = [json.loads(x)["text"].lower() for x in lines]
    qs = [x for x in (src / "squad2" / "questions.jsonl").read_text(encoding="utf-8").splitlines()
          if any(a.lower() in t for a in json.loads(x)["answers"] for t in texts)][:8]
    (out / "squad2").mkdir()
    (out / "squad2" / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "squad2" / "questions.jsonl").write_text("\n".join(qs) + "\n", encoding="utf-8")
    docs = (src / "cranfield" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    ids = {json.loads(d)["_id"] for d in docs}
    rows = list(csv.reader((src / "cranfield" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines(),
                           delimiter="\t"))
    rel = [r for r in rows[1:] if r[1] in ids]
    qids = {r[0] for r in rel}
    queries = [q for q in (src / "cranfield" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if json.loads(q)["_id"] in qids]
    (out / "cranfield" / "qrels").mkdir(parents=True)
    (out / "cranfield" / "corpus.jsonl").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (out / "cranfield" / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (out / "cranfield" / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in rel), encoding="utf-8")
    assert len(qs) >= 4 and len(queries) >= 3
    return out


def test_pipeline_latency_fresh_then_cached(small_data: Path) -> None:
    r = pipeline_latency.run(small_data / "squad2", n=4)
    assert r["questions"] == 4 and r["cache_hit_rate"] == 1.0
    # the report's arithmetic (how much faster cached answers are is a measurement: BENCHMARKS.md, not a test)
    assert r["fresh_ms"]["p50"] > 0 and r["cached_ms"]["p50"] > 0
    assert r["ratio_p50"] == pytest.approx(r["fresh_ms"]["p50"] / r["cached_ms"]["p50"])
    assert {"retrieve", "generate"} <= set(r["fresh_stage_mean_ms"])


def test_retrieval_modes_on_a_small_collection(small_data: Path) -> None:
    r = retrieval_modes.bench_one(str(small_data / "cranfield"))
    assert r["documents"] == 40 and r["chunks"] >= 40 and r["reingest_embedded"] == 0
    assert set(r["modes"]) == {"bm25", "dense", "hybrid"}
    assert all(0 < m["ndcg@10"] <= 1 for m in r["modes"].values())
    assert set(r["latency"]) == {"dense", "hybrid"}
    assert "| cranfield | hybrid |" in retrieval_modes.markdown([r])


def test_cache_lookup_rows(embedder) -> None:
    rows = cache_lookup.bench({"memory": MemoryBackend()}, embedder, 20)
    assert [r["layer"] for r in rows] == ["exact", "semantic (embedding given)", "semantic (embeds the query)",
                                          "retrieval"]
    assert all(r["backend"] == "memory" and 0 < r["median_us"] <= r["p95_us"] for r in rows)


def test_cold_ingest_times_both_trees_in_fresh_processes(tmp_path, capsys, shared_data: Path) -> None:
    """Before and after are both this checkout here: the table must come out with one row per code and the
    same chunk count in each (every run a fresh process with an empty index and embedding cache)."""
    rows = (shared_data / "eval" / "cisi" / "corpus.jsonl").read_text().splitlines()[:6]
    data = tmp_path / "six.jsonl"
    data.write_text("\n".join(rows) + "\n")
    cold_ingest.main([str(REPO), str(REPO), str(data), "--rounds", "1", "--only", "library"])
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| six.jsonl |")]
    assert [line.split(" | ")[3] for line in table] == ["before", "after", "after, 1 core"]
    assert len({line.split(" | ")[1] for line in table}) == 1 and int(table[0].split(" | ")[1]) >= 6


def test_real_headline_scores_answers_like_squad_and_tests_signs() -> None:
    assert real_headline.normalize("The  Eiffel-Tower!") == "eiffeltower"
    assert real_headline.correct("It was built by Gustave Eiffel in 1889.", ["Gustave Eiffel"])
    assert not real_headline.correct("It was built in Paris.", ["Gustave Eiffel"])
    assert real_headline.token_f1("Gustave Eiffel built it", ["Gustave Eiffel"]) == pytest.approx(2 * 0.5 / 1.5)
    assert real_headline.token_f1("nothing", ["Gustave Eiffel"]) == 0.0
    assert real_headline.sign_test(0, 0) == 1.0
    assert real_headline.sign_test(6, 0) == pytest.approx(2 / 64)
    assert real_headline.sign_test(3, 3) == 1.0


def test_real_headline_table_and_section(tmp_path: Path) -> None:
    side = {"accuracy": 0.5, "f1": 0.4, "answer_in_context": 0.9, "support_both": 0.6, "prompt_tokens": 200.0,
            "cached_tokens": 60.0, "completion_tokens": 20.0, "ttft_p50_ms": 100.0, "ttft_p95_ms": 150.0,
            "total_p50_ms": 900.0, "total_p95_ms": 1500.0}
    r = {"date": "2026-12-05", "model": "m.gguf", "n_ctx": 8192, "threads": 1, "wall_s": 1.0,
         "sets": {"hotpot_dev": {"questions": 2, "ragbudget": side, "sign_test": {"ragbudget_only": 1,
                                 "llamaindex_only": 0, "p": 1.0},
                                 "llamaindex": {**side, "accuracy": 0.25, "prompt_tokens": 400.0, "ttft_p50_ms": 300.0}}}}
    table = real_headline.markdown(r)
    assert "| hotpot_dev (2) | 0.5 / 0.25 (2.00×)" in table and "200.0 / 400.0 (0.50×)" in table
    assert "100.0 / 300.0 (0.33×)" in table and "0.6 / 0.6" in table
    doc = tmp_path / "B.md"
    doc.write_text("# Benchmarks\n", encoding="utf-8")
    real_headline.write_section(doc, table, "cmd", r)
    real_headline.write_section(doc, table, "cmd2", r)  # replaced in place, not appended twice
    text = doc.read_text(encoding="utf-8")
    assert text.count(real_headline.START) == 1 and "Command: `cmd2`" in text
