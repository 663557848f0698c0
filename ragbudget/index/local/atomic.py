"""Atomic folder swaps for the local index: write a sibling temp folder, then rename it into place.

A crash or Ctrl-C mid-save leaves the previous index loadable; a swap interrupted between its two renames
is repaired on the next load (:func:`recover_swap`); :func:`clean_leftovers` removes a crash's temp folders.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from .manifest import MANIFEST_FILE

log = logging.getLogger(__name__)


def fsync_dir(folder: Path) -> None:
    for p in folder.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())


def clean_leftovers(target: Path) -> list[str]:
    """Remove what an interrupted save of ``target`` left beside it (``.NAME.tmp-PID`` folders, and
    ``.NAME.old`` once the index itself is in place). Call only while holding the index's writer lock."""
    removed: list[str] = []
    parent = target.parent
    if not parent.is_dir():
        return removed
    for p in parent.glob(f".{target.name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p.name)
    old = parent / f".{target.name}.old"
    if old.exists() and (target / MANIFEST_FILE).is_file():
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old.name)
    if removed:
        log.info("removed leftovers of an interrupted save: %s", removed)
    return removed


def recover_swap(target: Path) -> None:
    """Finish or undo a swap interrupted between its renames: put the previous index back."""
    old = target.parent / f".{target.name}.old"
    if not target.exists() and (old / MANIFEST_FILE).is_file():
        os.replace(old, target)
