"""What the benchmark scripts share: where the checkout and the shared data sets are.

The scripts run from a checkout (``.venv/bin/python benchmarks/NAME.py ...``), never from an installed
package: importing this module puts the checkout first on ``sys.path`` (so the scripts measure this tree's
``ragbudget``), and data paths are resolved from the repository root — ``ROOT/../shared/data`` — or taken
from the script's ``--data`` option.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root (benchmarks/..)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHARED_DATA = ROOT.parent / "shared" / "data"
EVAL_DATA = SHARED_DATA / "eval"


def data_dir(path: str | Path, *need: str) -> Path:
    """``path`` as a folder holding ``need`` (file or folder names); exits with a clear message if not."""
    folder = Path(path)
    missing = [n for n in need if not (folder / n).exists()]
    if not folder.is_dir() or missing:
        what = f"{folder} (missing: {', '.join(missing)})" if folder.is_dir() else str(folder)
        raise SystemExit(f"data not found: {what} (the shared data sets live in {SHARED_DATA})")
    return folder
