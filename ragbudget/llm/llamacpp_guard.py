"""Load-time guard for llama.cpp builds that use instructions this machine cannot execute.

A llama.cpp built with ``-march=native`` on a CPU that advertises AMX compiles AMX kernels for quantized
weights; a virtual machine may advertise AMX and still trap its instructions, and the process then dies
with SIGILL ("Illegal instruction") on the first prompt of a few hundred tokens — no Python error, no log.
When the installed build reports AMX, the model is first run once in a child process on a prompt long enough
to reach those kernels; a child killed by SIGILL becomes a clear :class:`BackendUnavailableError` naming the
rebuild that fixes it, instead of a dead server. The verdict is remembered per build for the process.
``.ci/install`` builds llama.cpp without AMX (``.ci/llama_cmake_args``), so its builds skip the probe.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

from ..errors import BackendUnavailableError

REBUILD_FIX = ("rebuild llama-cpp-python without native-only kernels: CMAKE_ARGS=\"$(bash .ci/llama_cmake_args)\" "
               "pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python llama-cpp-python "
               "(or CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF')")
PROBE = """
import sys, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_ctx=512, n_batch=512, verbose=False)
llm.eval(llm.tokenize(b"The quick brown fox jumps over the lazy dog. " * 30)[:400])
"""

_verdicts: dict[str, str | None] = {}
_lock = threading.Lock()


def system_info() -> str:
    """llama.cpp's own report of the instruction sets and backends it was built with."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)


def uses_amx(info: str) -> bool:
    """Whether a llama.cpp system-info report says its CPU backend runs AMX kernels."""
    return any(f"{name} = 1" in info for name in ("AMX_INT8", "AMX_BF16", "AMX_TILE"))


def probe(model_path: Path, command: Sequence[str] | None = None, timeout_s: float = 120.0) -> str | None:
    """Run the model on a ~400-token prompt in a child process: None when it ran, else why not."""
    cmd = list(command) if command is not None else [sys.executable, "-c", PROBE, str(model_path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None  # slow, not killed: nothing to refuse
    if proc.returncode == -signal.SIGILL:
        return "killed by SIGILL (an instruction this CPU or virtual machine does not allow, e.g. AMX)"
    return None


def check_cpu_support(model_path: Path, *, info: str | None = None,
                      command: Sequence[str] | None = None) -> None:
    """Refuse a llama.cpp build that would crash this process on ``model_path`` (see the module doc)."""
    info = system_info() if info is None else info
    if not uses_amx(info):
        return
    key = f"{info}|{command}"
    with _lock:
        if key not in _verdicts:
            _verdicts[key] = probe(Path(model_path), command)
        why = _verdicts[key]
    if why is not None:
        raise BackendUnavailableError(f"the installed llama.cpp build uses AMX kernels and a test run of "
                                      f"{model_path} was {why}", fix=REBUILD_FIX)
