"""Issue 29: timings that do not mislead. Model loading is not a query stage (a RAG that was not warmed up
loads its models before the query's clock starts and says how long that took, apart), and the line the CLI
prints (quickstart, query) lists every top-level stage plus the time between them, adding up to the total."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from ragbudget.cli.query_cmds import print_answer
from ragbudget.config import EmbeddingConfig
from ragbudget.embed.encoder import SentenceTransformerEmbedder
from ragbudget.observe.timing import breakdown
from ragbudget.pipeline import RAG

QUESTION = "what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft"


def _adds_up(t) -> None:
    parts = breakdown(t)
    assert parts[-1][0] == "other"
    assert abs(sum(ms for _, ms, _ in parts) - t.total_ms) < 1e-6 or parts[-1][1] == 0.0
    assert sum(ms for _, ms, _ in parts[:-1]) <= t.total_ms + 1e-6


class SlowDiskEmbedder(SentenceTransformerEmbedder):
    """The real MiniLM, read from a disk that takes LOAD_S longer (so loading is unmistakable in timings)."""

    def warm_up(self) -> None:
        if self._model is None:
            time.sleep(LOAD_S)
        super().warm_up()


LOAD_S = 2.5


def test_model_loading_is_not_counted_in_a_query_stage(cranfield_rag, service_config):
    # a RAG that was never warmed up: its first query loads the embedding model (the cache lookup and the
    # dense search embed the question); that time is load_ms, in no stage and not in the total
    rag = RAG(service_config, embedder=SlowDiskEmbedder(EmbeddingConfig(cache=False)))
    try:
        first = rag.query(QUESTION + " first", index="default")
        t = first.timings
        assert t.load_ms is not None and t.load_ms >= LOAD_S * 1000, t
        assert t.stages["cache_response"] < LOAD_S * 1000 and t.stages["embed"] < LOAD_S * 1000, t.stages
        assert "index" in t.stages  # opening the index is a stage of its own, not hidden in the total
        _adds_up(t)
        second = rag.query(QUESTION + " second", index="default")
        assert second.timings.load_ms is None
        assert second.to_dict()["timings"]["load_ms"] is None and first.to_dict()["timings"]["load_ms"] == t.load_ms
    finally:
        rag.close()


def test_printed_timings_add_up_to_the_total(cranfield_rag):
    ans = cranfield_rag.query(QUESTION + " printed", index="default")
    _adds_up(ans.timings)
    out = io.StringIO()
    print_answer(ans, Console(file=out, width=400))
    line = next(x for x in out.getvalue().splitlines() if "total" in x)
    m = re.search(r"total ([\d.]+) ms = (.*?) · TTFT", line)
    assert m, line
    shown = dict((k, float(v)) for k, v in re.findall(r"(?:^|\+ )(\w+) ([\d.]+)", m.group(2)))
    for stage in ("index", "cache_response", "retrieve", "context", "route", "generate", "other"):
        assert stage in shown, line
    assert "embed" in line and "dense" in line  # sub-stages shown inside their stage
    assert abs(sum(shown.values()) - float(m.group(1))) <= 0.05 * len(shown) + 0.05, line


def test_ingest_progress_advances_by_embedded_batches(tmp_path, embedder, docs_root):
    # issue 29: the bars jumped once per 1024 chunks / 8192 sentences, i.e. froze for the whole embedding of
    # a corpus of a few hundred documents; now about 20 steps per stage, each a batch actually embedded
    from ragbudget.config import Config

    events: list[tuple[str, int, int, float]] = []
    with RAG(Config().with_overrides({"index.dir": str(tmp_path)}), embedder=embedder) as rag:
        report = rag.indexes.ingest(docs_root / "cranfield50.jsonl", "progress",
                                    progress=lambda st, d, n: events.append((st, d, n, time.perf_counter())))
    for stage, expected in (("embed", report.embedded), ("sentences", report.sentences_warmed)):
        ticks = [(d, n) for st, d, n, _ in events if st == stage]
        assert ticks and ticks[-1] == (expected, expected), (stage, ticks)
        assert len(ticks) >= 2, (stage, ticks)  # not one jump at the end
        done = [0] + [d for d, _ in ticks]
        assert all(b > a for a, b in zip(done, done[1:]))
        assert max(b - a for a, b in zip(done, done[1:])) <= max(32 if stage == "embed" else 256,
                                                                 -(-expected // 20)), (stage, ticks)
