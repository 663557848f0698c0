"""Issue 29: commands people can trust. The real CLI (in a subprocess where start-up is what is tested),
real indexes and the real replay/compare loops: failures exit non-zero naming the cause, output is printed
once and as written, `--help`/`--version` are fast because the parser imports no model code."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ragbudget.cli import main as cli_main
from ragbudget.cli.query_cmds import print_answer
from ragbudget.config import Config
from ragbudget.eval.compare import compare
from ragbudget.eval.outcome import ABORT_AFTER
from ragbudget.eval.replay import LibraryTarget, replay
from ragbudget.eval.traffic import TrafficRecord, save_traffic
from ragbudget.pipeline import RAG

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "ragbudget", *args], cwd=ROOT, env=e, capture_output=True,
                          text=True, timeout=timeout)


MODEL_MODULES = ("torch", "sentence_transformers")
_RUN_AND_REPORT = """import json, sys
from ragbudget.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exit_:
    rc = exit_.code
print(json.dumps({"rc": rc, "models": [m for m in %r if m in sys.modules]}))
""" % (MODEL_MODULES,)


def _run_reporting_models(*args: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    """Run the CLI in a fresh process; its exit code, which model libraries it loaded, and its stderr."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    out = subprocess.run([sys.executable, "-c", _RUN_AND_REPORT, *args], cwd=ROOT, env=e, capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _traffic(path: Path, n: int, index: str | None = None) -> Path:
    recs = [TrafficRecord(id=f"r{i}", t=i * 0.001, question=f"What is lift number {i}?", index=index)
            for i in range(n)]
    save_traffic(recs, path)
    return path


def test_help_and_version_load_no_model_code() -> None:
    code = ("import sys, contextlib, io\n"
            "from ragbudget.cli import build_parser\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: build_parser().parse_args(['--help'])\n"
            "    except SystemExit: pass\n"
            "heavy = [m for m in ('torch', 'faiss', 'ragbudget.pipeline', 'llama_index.core', 'uvicorn')"
            " if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    v = _run("--version")
    assert v.returncode == 0 and v.stdout.startswith("ragbudget ") and len(v.stdout.split()) == 2


def test_hardcoded_cli_choices_match_the_library() -> None:
    from ragbudget.cli import eval_cmds, index_cmds, query_cmds
    from ragbudget.eval.longdocs import GROUPS
    from ragbudget.llm.models import SMOLLM2_INSTALL
    from ragbudget.retrieval.search import MODES

    assert index_cmds.MODES == MODES and eval_cmds.GROUPS == GROUPS
    assert query_cmds.SMOLLM2_INSTALL == SMOLLM2_INSTALL


def test_bench_compare_without_the_index_fails_at_once_naming_it(tmp_path: Path) -> None:
    traffic = _traffic(tmp_path / "t.jsonl", 40)
    got, err = _run_reporting_models("bench", "compare", "configs/default.yaml", "configs/compare_budget_off.yaml",
                                     "--traffic", str(traffic), env={"RAGBUDGET_INDEX__DIR": str(tmp_path / "none")})
    assert got["rc"] == 1, err
    assert "'default', which does not exist" in err and "--ingest" in err
    assert got["models"] == []  # refused before any model loaded, so no schedule ran


def test_bench_replay_without_the_index_fails_naming_it(tmp_path: Path) -> None:
    traffic = _traffic(tmp_path / "t.jsonl", 10, index="nosuch")
    out = _run("bench", "replay", str(traffic), env={"RAGBUDGET_INDEX__DIR": str(tmp_path / "none")})
    assert out.returncode == 1
    assert "'nosuch', which does not exist" in out.stderr and "ragbudget ingest" in out.stderr


def test_bench_outputs_go_into_a_folder_that_does_not_exist_yet(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    questions = tmp_path / "questions.txt"
    questions.write_text("How does lift grow?\nWhat slows supersonic flow?\n", encoding="utf-8")
    out = tmp_path / "scratch" / "deeper" / "traffic.jsonl"  # as the README writes it: scratch/traffic.jsonl
    rc = cli_main(["bench", "traffic", str(questions), "--out", str(out), "--n", "5"])
    assert rc == 0, capsys.readouterr().err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 5


def test_readme_commands_write_only_to_ignored_places() -> None:
    # the walk-through's "done when": after the README's commands `git status` shows no stray file
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    outputs = re.findall(r"ragbudget (?:bench|eval)[^\n]*?--(?:out|plot|json) ([^\s\]]+)", readme)
    outputs += re.findall(r"ragbudget batch \S+ (\S+)", readme)
    assert len(outputs) >= 3, outputs
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "scratch/" in ignored
    stray = [o for o in outputs if not o.startswith(("scratch/", "/tmp/"))]
    assert not stray, f"README commands write into the checkout outside scratch/: {stray}"


@pytest.mark.parametrize("command", ["replay", "compare"])
def test_bench_report_path_that_cannot_be_written_fails_before_the_run(tmp_path: Path, command: str) -> None:
    traffic = _traffic(tmp_path / "t.jsonl", 5)
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")  # a folder cannot be made under a file
    args = (["bench", "replay", str(traffic)] if command == "replay" else
            ["bench", "compare", "configs/default.yaml", "configs/compare_budget_off.yaml", "--traffic", str(traffic)])
    got, err = _run_reporting_models(*args, "--json", str(blocker / "out.json"),
                                     env={"RAGBUDGET_INDEX__DIR": str(tmp_path / "none")})
    assert got["rc"] == 1, err
    assert "--json" in err and str(blocker / "out.json") in err and "Traceback" not in err
    assert got["models"] == []  # refused before any model loaded or any request ran


@pytest.fixture(scope="module")
def tiny_rag(tmp_path_factory: pytest.TempPathFactory, embedder) -> RAG:
    work = tmp_path_factory.mktemp("trust")
    docs = work / "docs"
    docs.mkdir()
    (docs / "lift.md").write_text(
        "# Lift [bold]and[/bold] drag\n\nLift grows with the angle of attack [1] until the wing stalls. "
        "Drag grows with the square of speed [see note 2].\n", encoding="utf-8")
    cfg = Config().with_overrides({"index.dir": str(work / "indexes"), "embedding.cache": False,
                                   "cache.semantic.enabled": False})
    rag = RAG(cfg, embedder=embedder)
    rag.ingest(docs)
    yield rag
    rag.close()


def test_replay_stops_when_every_request_fails_and_names_the_cause(tiny_rag: RAG) -> None:
    recs = [TrafficRecord(id=f"r{i}", t=0.0, question=f"q{i}", index="missing") for i in range(200)]
    seen: list[int] = []
    rep = asyncio.run(replay(recs, LibraryTarget(tiny_rag), max_in_flight=1, on_result=lambda r: seen.append(r.status)))
    s = rep.summary()
    assert rep.aborted and s["ok"] == 0 and ABORT_AFTER <= s["sent"] < len(recs)
    assert len(seen) == s["sent"]  # the progress callback saw every finished request
    (cause,) = s["error_causes"]
    assert cause["count"] == s["sent"] and "IndexNotFoundError" in cause["error"]
    # the same in an A/B run
    rep2 = asyncio.run(compare(recs, LibraryTarget(tiny_rag, name="a"), LibraryTarget(tiny_rag, name="b")))
    assert rep2.aborted and len(rep2.a) == len(rep2.b) == ABORT_AFTER


def test_replay_of_good_traffic_is_not_aborted(tiny_rag: RAG) -> None:
    recs = [TrafficRecord(id=f"r{i}", t=0.0, question="How does lift grow?") for i in range(3)]
    rep = asyncio.run(replay(recs, LibraryTarget(tiny_rag), abort_after=1))
    assert rep.aborted is None and rep.summary()["ok"] == 3 and rep.summary()["error_causes"] == []


def test_answers_and_sources_print_as_written_once(tiny_rag: RAG) -> None:
    ans = tiny_rag.query("How does lift grow with the angle of attack?")
    assert "[1]" in ans.answer or "[see note 2]" in ans.answer or "[bold]" in ans.answer or ans.citations
    buf = io.StringIO()
    print_answer(ans, Console(file=buf, width=300, color_system=None), streamed=False)
    text = buf.getvalue()
    assert text.count(ans.answer.splitlines()[0]) == 1
    assert "Lift [bold]and[/bold] drag" in text  # the cited title, markup-looking text kept
    buf = io.StringIO()
    print_answer(ans, Console(file=buf, width=300, color_system=None), streamed=True)
    assert ans.answer.splitlines()[0] not in buf.getvalue()  # streamed already: not printed again


def test_query_piped_prints_the_answer_once(tiny_rag: RAG, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["query", "How does lift grow with the angle of attack?", "--index", "default",
                   "--index-dir", tiny_rag.config.index.dir])
    out = capsys.readouterr()
    assert rc == 0, out.err
    first = out.out.split("A: ", 1)[1].splitlines()[0]
    assert out.out.count(first) == 1 and "[1]" in out.out


def test_query_of_a_missing_index_fails_before_models_load(tmp_path: Path) -> None:
    got, err = _run_reporting_models("query", "anything", "--index", "nosuch", "--index-dir", str(tmp_path))
    assert got["rc"] == 1 and "no index named 'nosuch'" in err
    assert got["models"] == []


def test_delete_with_a_relative_source_resolves_it_and_hints_when_nothing_matched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Panel flutter appears at high dynamic pressure.", encoding="utf-8")
    (docs / "b.md").write_text("A normal shock slows supersonic flow.", encoding="utf-8")
    idx = str(tmp_path / "ix")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["ingest", "docs", "--index-dir", idx, "--quiet"]) == 0
    capsys.readouterr()
    assert cli_main(["delete", "--source", "docs/a.md", "--index-dir", idx]) == 0
    assert "removed 1 chunk" in capsys.readouterr().out
    assert cli_main(["delete", "--source", "docs/nothere.md", "--index-dir", idx]) == 1
    err = capsys.readouterr().err
    assert "nothing matched" in err and str(tmp_path / "docs" / "nothere.md") in err and "fix:" in err


def test_eval_json_prints_only_json(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["eval", "history", str(shared_data / "canard"), "--sweep", "0,64", "--limit", "20", "--json"])
    out = capsys.readouterr().out
    assert rc == 0 and len(out.strip().splitlines()) == 1 and len(json.loads(out)["sweep"]) == 2


def test_a_bad_llamacpp_model_path_fails_start_up_loudly(tmp_path: Path, embedder,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    import httpx

    from ragbudget.service.app import BackgroundServer, create_app

    bad = tmp_path / "missing.gguf"
    cfg = Config().with_overrides({"index.dir": str(tmp_path / "ix"), "embedding.cache": False,
                                   "llm.tiers": [{"name": "small", "backend": "llamacpp", "model": str(bad)}]})
    with caplog.at_level("ERROR"), BackgroundServer(create_app(RAG(cfg, embedder=embedder), cfg)) as srv:
        ready = httpx.get(srv.url + "/readyz", timeout=10)
        q = httpx.post(srv.url + "/v1/query", json={"question": "lift?", "stream": False}, timeout=10)
    assert ready.status_code == 503 and str(bad) in ready.text
    assert q.status_code == 503 and str(bad) in q.text
    assert any(str(bad) in r.getMessage() for r in caplog.records)  # logged at start-up, not silent
