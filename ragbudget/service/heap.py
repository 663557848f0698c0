"""Keep the garbage collector off the loaded models and indexes (``service.gc_freeze``).

After start-up the process holds ~600k long-lived objects (torch, transformers, llama-index, the indexes);
one full cyclic collection over them stalls every request for ~0.4 s (BENCHMARKS.md). :func:`freeze` moves
them to the permanent generation once they are loaded. An ingest job replaces an index: :func:`refreeze`
then lets the collector see everything once (so the old index's reference cycles are freed, not leaked)
and freezes again — one full collection per ingest instead of one at a random moment under load.
"""

from __future__ import annotations

import gc


def freeze() -> int:
    """Collect once, then move every surviving object to the permanent generation. Returns its size."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def refreeze() -> int:
    """Unfreeze, collect what became garbage while frozen, freeze again."""
    gc.unfreeze()
    return freeze()
