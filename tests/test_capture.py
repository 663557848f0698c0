"""Traffic capture (service.capture): a real app on 127.0.0.1 writes one line per served request, and
``ragbudget bench replay`` (the CLI main, in process) replays the captured file against it."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import httpx
import pytest

from ragbudget.cli import main
from ragbudget.config import Config
from ragbudget.errors import ConfigError
from ragbudget.eval.capture import TrafficCapture
from ragbudget.eval.traffic import load_traffic, parse_lines
from ragbudget.service.app import BackgroundServer, create_app
from service_fixtures import KEYS

QUESTIONS = ["What is the boundary layer transition at supersonic speeds?",
             "How does heat transfer change in hypersonic flow?"]
AUTH = {"Authorization": f"Bearer {KEYS['acme']}"}


def _serve_some(url: str) -> None:
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
        r = c.post("/v1/query", json={"question": QUESTIONS[0], "max_tokens": 64, "mode": "concise"})
        assert r.status_code == 200, r.text
        with c.stream("POST", "/v1/query", json={"question": QUESTIONS[1], "stream": True,
                                                  "history": [{"role": "user", "content": "hello"},
                                                              {"role": "assistant", "content": "hi"}]}) as s:
            assert s.status_code == 200
            assert "event: final" in s.read().decode()
        again = {"question": QUESTIONS[0], "max_tokens": 64, "mode": "concise"}
        assert c.post("/v1/query", json=again).status_code == 200  # a response-cache hit
        r = c.post("/v1/chat/completions", json={"model": "ragbudget",
                                                 "messages": [{"role": "user", "content": QUESTIONS[1]}]})
        assert r.status_code == 200, r.text


def test_capture_then_replay_every_line(cranfield_rag, service_config: Config, tmp_path: Path, capsys) -> None:
    cap = tmp_path / "captured.jsonl"
    cfg = service_config.with_overrides({"service.capture.path": str(cap)})
    app = create_app(cranfield_rag, cfg)
    with BackgroundServer(app) as srv:
        _serve_some(srv.url)
        assert app.state.svc.capture.flush()
        lines = [json.loads(x) for x in cap.read_text().splitlines()]
        assert len(lines) == 4
        assert [x["question"] for x in lines] == [QUESTIONS[0], QUESTIONS[1], QUESTIONS[0], QUESTIONS[1]]
        assert {x["tenant"] for x in lines} == {"acme"} and {x["index"] for x in lines} == {"default"}
        assert [x["stream"] for x in lines] == [False, True, False, False]
        assert lines[1]["history_len"] == 1 and lines[0]["max_tokens"] == 64
        assert lines[0]["mode"] == "concise" and "mode" not in lines[1]
        assert lines[0]["cache_layer"] is None and lines[2]["cache_layer"] == "exact"
        assert lines[0]["tokens"]["retrieved"] > 0 and lines[0]["tokens"]["question"] > 0
        assert lines[0]["route"] and all(x["ttft_ms"] > 0 for x in lines)
        assert len({x["id"] for x in lines}) == 4 and all(x["ts"] > 1e9 for x in lines)
        recs = load_traffic(cap)  # the replay reader takes every line as it is
        assert [r.question for r in recs] == [x["question"] for x in lines]
        assert recs[0].t == 0.0 and all(b.t >= a.t for a, b in zip(recs, recs[1:]))
        assert recs[0].mode == "concise" and recs[0].index == "default" and recs[0].max_tokens == 64

        snap = tmp_path / "snapshot.jsonl"  # the replays below are captured too: replay what was served first
        snap.write_text(cap.read_text())
        out, png = tmp_path / "replay.json", tmp_path / "replay.png"
        argv = ["bench", "replay", str(snap), "--url", srv.url, "--api-key", f"acme={KEYS['acme']}",
                "--speed", "1000", "--max-in-flight", "1", "--json", str(out), "--plot", str(png)]
        capsys.readouterr()
        assert main(argv + ["--index", "default"]) == 0
        assert f"plot written to {png}" in capsys.readouterr().err
        report = json.loads(out.read_text())
        assert report["summary"]["sent"] == report["summary"]["ok"] == 4
        assert [r["id"] for r in report["requests"]] == [x["id"] for x in lines]
        assert report["summary"]["cache_hit_rate"] > 0  # the captured questions were answered before
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # --index is honoured over HTTP: an index the tenant may not see is refused for every line, and
        # a replay where nothing was answered still writes its plot
        png.unlink()
        assert main(argv + ["--index", "globex"]) == 1
        report = json.loads(out.read_text())
        assert report["summary"]["ok"] == 0 and sum(report["summary"]["errors_by_status"].values()) == 4
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    # the answered replays went through the same server: captured too, on disk once the app has shut down
    assert len(load_traffic(cap)) == 4 + 4


@pytest.fixture(scope="module")
def answer(cranfield_rag):
    return cranfield_rag.query(QUESTIONS[0], index="default", max_tokens=32)


@pytest.mark.parametrize("redact", ["none", "hash", "drop"])
def test_redaction_modes(answer, tmp_path: Path, redact: str) -> None:
    path = tmp_path / f"{redact}.jsonl"
    cap = TrafficCapture(path, redact)
    for i in range(3):
        cap.record(answer, question=QUESTIONS[0], arrival=1_000_000.0 + i, tenant="acme", index="default")
    cap.close()
    text = path.read_text()
    recs = parse_lines(text.splitlines(), str(path))
    assert len(recs) == 3 and [r.t for r in recs] == [0.0, 1.0, 2.0]
    digest = hashlib.sha256(QUESTIONS[0].encode()).hexdigest()
    if redact == "none":
        assert {r.question for r in recs} == {QUESTIONS[0]}
    elif redact == "hash":
        assert "boundary" not in text
        assert {r.question for r in recs} == {f"sha256:{digest}"}  # a repeat stays a repeat
        assert all(json.loads(x)["question_sha256"] == digest for x in text.splitlines())
    else:
        assert "boundary" not in text and digest not in text
        assert len({r.question for r in recs}) == 3  # nothing kept: no two requests look alike
        assert all(json.loads(x)["question_tokens"] == 0 for x in text.splitlines())


def test_no_line_lost_under_concurrent_writers(answer, tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    cap = TrafficCapture(path, "hash")
    threads = [threading.Thread(target=lambda: [cap.record(answer, arrival=2e9, tenant="t") for _ in range(50)])
               for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    cap.close()  # shutdown: whatever is still queued is written first
    lines = path.read_text().splitlines()
    assert len(lines) == 400 and cap.written == 400 and cap.dropped == 0
    assert len({json.loads(x)["id"] for x in lines}) == 400
    cap.record(answer, arrival=2e9, tenant="t")  # after close: ignored, not an error
    assert len(path.read_text().splitlines()) == 400


def test_unknown_redaction_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="redact"):
        Config().with_overrides({"service.capture.redact": "rot13"})


def test_requests_refused_by_admission_are_captured(cranfield_rag, service_config: Config, tmp_path: Path) -> None:
    cap = tmp_path / "refused.jsonl"
    cfg = service_config.with_overrides({"service.capture.path": str(cap), "service.capture.redact": "hash"})
    headers = {"Authorization": f"Bearer {KEYS['tiny']}"}  # 2 requests of burst, then 429
    with BackgroundServer(create_app(cranfield_rag, cfg)) as srv, \
            httpx.Client(base_url=srv.url, headers=headers, timeout=60) as c:
        codes = [c.post("/v1/query", json={"question": QUESTIONS[0]}).status_code for _ in range(2)]
        codes.append(c.post("/v1/query", json={"question": QUESTIONS[1], "stream": True}).status_code)
    assert codes == [200, 200, 429]
    lines = [json.loads(x) for x in cap.read_text().splitlines()]  # on disk: the app has shut down
    assert [x["status"] for x in lines] == [200, 200, 429] and [x["stream"] for x in lines] == [False, False, True]
    assert "tokens" not in lines[2] and lines[2]["tenant"] == "tiny"
    assert "boundary" not in cap.read_text()
    recs = load_traffic(cap)  # a refused request is part of the arrivals: replay sends it again
    assert len(recs) == 3 and recs[0].question == recs[1].question != recs[2].question
