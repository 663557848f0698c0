"""HybridIndex: ingest, persistence, re-ingest diffing, atomic save, manifest checks (real FAISS + MiniLM)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ragbudget.config import BM25Config, Config, FaissConfig
from ragbudget import RAG
from ragbudget.embed.encoder import SentenceTransformerEmbedder
from ragbudget.errors import IndexBusyError, IndexMismatchError, IndexNotFoundError, IngestError
from ragbudget.index import Analyzer, DenseIndex, HybridIndex, SparseIndex, ingest_path
from ragbudget.index.local.lock import index_write_lock, lock_path

from fixtures_retrieval import CountingEmbedder, cfg, embedder, minimal_pdf, real_embedder  # noqa: F401


def corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "wings.md").write_text("# Wings\n\nSwept wings delay compressibility drag at high subsonic speed.")
    (root / "heat.txt").write_text("Heat transfer to a blunt body in hypersonic flow is largest at the stagnation point.")
    (root / "flutter.pdf").write_bytes(minimal_pdf("Panel flutter of thin plates at supersonic speeds"))
    (root / "shock.html").write_text("<title>Shocks</title><p>Oblique shock waves form at a compression corner.</p>")
    (root / "bad.txt").write_bytes(b"\x00\x00binary")
    return root


def test_ingest_save_load_roundtrip(tmp_path: Path, cfg: Config, embedder: CountingEmbedder) -> None:
    docs = corpus(tmp_path / "docs")
    report = ingest_path(docs, "kb", cfg, embedder)
    assert report.documents == 4 and report.files_read == 4
    assert report.chunks_added == report.embedded == embedder.texts_embedded == 4
    assert [Path(w).name for w, _ in report.skipped] == ["bad.txt"]
    idx = HybridIndex.load("kb", cfg, model_id=embedder.model_id)
    m = idx.manifest
    assert (m.n_chunks, m.n_documents, m.embedding_model, m.embedding_dim) == (4, 4, embedder.model_id, 384)
    assert m.chunker["chunk_size"] == cfg.chunking.chunk_size and m.content_version == report.content_version
    (top, score), *_ = idx.search_dense(embedder.embed_query("flutter of plates"), 2)
    assert top.source.endswith("flutter.pdf") and score > 0.3
    (top, _), *_ = idx.search_sparse("stagnation point heating", 2)
    assert top.source.endswith("heat.txt")


def test_reingest_embeds_only_changes_and_removes_deleted(tmp_path: Path, cfg: Config,
                                                          embedder: CountingEmbedder) -> None:
    docs = corpus(tmp_path / "docs")
    first = ingest_path(docs, "kb", cfg, embedder)
    embedder.texts_embedded = 0
    again = ingest_path(docs, "kb", cfg, embedder)
    assert embedder.texts_embedded == 0 and again.embedded == 0
    assert (again.chunks_added, again.chunks_unchanged, again.chunks_removed) == (0, 4, 0)
    assert again.content_version == first.content_version

    (docs / "heat.txt").write_text("Heat shields ablate during re-entry.")
    (docs / "wings.md").unlink()
    changed = ingest_path(docs, "kb", cfg, embedder)
    assert embedder.texts_embedded == 1
    assert (changed.chunks_added, changed.chunks_removed, changed.documents_removed) == (1, 2, 1)
    idx = HybridIndex.load("kb", cfg, model_id=embedder.model_id)
    sources = {Path(c.source).name for c in idx.store}
    assert sources == {"heat.txt", "flutter.pdf", "shock.html"}
    assert any("ablate" in c.text for c in idx.store)
    assert idx.search_sparse("swept wings delay", 5) == []


def test_file_unreadable_on_reingest_keeps_its_chunks(tmp_path: Path, cfg: Config, embedder: CountingEmbedder) -> None:
    docs = corpus(tmp_path / "docs")
    ingest_path(docs, "kb", cfg, embedder)
    (docs / "heat.txt").write_bytes(b"\x00now binary")
    report = ingest_path(docs, "kb", cfg, embedder)
    assert report.chunks_removed == 0
    idx = HybridIndex.load("kb", cfg)
    assert any(Path(c.source).name == "heat.txt" for c in idx.store)


def test_crash_mid_save_leaves_previous_index_loadable(tmp_path: Path, cfg: Config, embedder: CountingEmbedder,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    docs = corpus(tmp_path / "docs")
    before = ingest_path(docs, "kb", cfg, embedder)
    (docs / "extra.txt").write_text("Laminar flow control by suction.")

    def boom(self: SparseIndex, folder: Path) -> None:
        raise KeyboardInterrupt("simulated Ctrl-C mid-save")

    monkeypatch.setattr(SparseIndex, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        ingest_path(docs, "kb", cfg, embedder)
    monkeypatch.undo()
    idx = HybridIndex.load("kb", cfg, model_id=embedder.model_id)
    assert idx.version == before.content_version and len(idx) == 4
    assert sorted(p.name for p in Path(cfg.index.dir).iterdir()
                  if p.name not in (".embcache.sqlite", ".kb.lock")) == ["kb"]


def test_swap_interrupted_between_renames_is_repaired(tmp_path: Path, cfg: Config, embedder: CountingEmbedder) -> None:
    report = ingest_path(corpus(tmp_path / "docs"), "kb", cfg, embedder)
    root = Path(cfg.index.dir)
    (root / "kb").rename(root / ".kb.old")  # the state right after the first rename of a swap
    assert HybridIndex.load("kb", cfg).version == report.content_version


def test_model_mismatch_and_missing_index(tmp_path: Path, cfg: Config, embedder: CountingEmbedder) -> None:
    ingest_path(corpus(tmp_path / "docs"), "kb", cfg, embedder)
    with pytest.raises(IndexMismatchError) as e:
        HybridIndex.load("kb", cfg, model_id="other-model")
    assert "other-model" in str(e.value) and embedder.model_id in str(e.value) and "--rebuild" in str(e.value)
    with pytest.raises(IndexNotFoundError) as e2:
        HybridIndex.load("nope", cfg)
    assert "kb" in str(e2.value) and "ragbudget ingest" in str(e2.value)


def test_rebuild_starts_from_empty(tmp_path: Path, cfg: Config, embedder: CountingEmbedder) -> None:
    docs = corpus(tmp_path / "docs")
    ingest_path(docs, "kb", cfg, embedder)
    other = tmp_path / "other"
    other.mkdir()
    (other / "one.txt").write_text("A single document.")
    report = ingest_path(other, "kb", cfg, embedder, rebuild=True)
    assert report.chunks_added == 1 and len(HybridIndex.load("kb", cfg)) == 1


def _unit(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_faiss_kinds_find_the_nearest_vector(kind: str) -> None:
    vecs = _unit(500)
    idx = DenseIndex(16, FaissConfig(kind=kind, ivf_nlist=4, ivf_nprobe=4), vecs)
    assert idx.kind == kind
    hits = idx.search(vecs[123], 5)
    assert hits[0][0] == 123 and abs(hits[0][1] - 1.0) < 1e-4


def test_ivf_falls_back_to_flat_with_a_note_when_too_few_vectors() -> None:
    idx = DenseIndex(16, FaissConfig(kind="ivf", ivf_nlist=256), _unit(100))
    assert idx.kind == "flat" and "ivf needs" in idx.notes[0]
    assert idx.search(_unit(100)[7], 1)[0][0] == 7


def test_analyzer_stems_and_drops_stop_words() -> None:
    a = Analyzer(BM25Config())
    assert a("The flows of the Boundary-Layers, were separating!") == ["flow", "boundari", "layer", "separ"]
    assert a("what is the of and ?!") == []
    raw = Analyzer(BM25Config(stemmer="none", stopwords=False))
    assert raw("The flows") == ["the", "flows"]


def test_sparse_search_ranks_by_bm25_and_skips_stopword_queries() -> None:
    sp = SparseIndex(BM25Config())
    sp.rebuild(sp.analyze_many(["supersonic flow over wings", "heat transfer in slabs", "wing flutter wing"]))
    assert [r for r, _ in sp.search("wing", 3)] == [2, 0]
    assert sp.search("the of and", 3) == []
    assert SparseIndex(BM25Config()).search("anything", 3) == []


# ------------------------------------------------------------------------------------- one writer

def test_second_writer_waits_then_fails_naming_the_holder(tmp_path: Path, cfg: Config,
                                                          embedder: CountingEmbedder) -> None:
    docs = corpus(tmp_path / "docs")
    folder = HybridIndex.path_for("kb", cfg)
    holder = subprocess.Popen(  # another process (e.g. a CLI ingest) holds the writer lock
        [sys.executable, "-c", "import sys, time\n"
         "from ragbudget.index.local.lock import index_write_lock\n"
         f"with index_write_lock({str(folder)!r}, 5):\n"
         "    print('held', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        notices: list[str] = []
        busy = cfg.with_overrides({"index.lock_timeout_s": 0.3})
        with pytest.raises(IndexBusyError, match=f"pid {holder.pid}"):
            ingest_path(docs, "kb", busy, embedder, progress=lambda stage, *_: notices.append(stage))
        assert any(n.startswith("wait:") for n in notices)
        assert not HybridIndex.exists("kb", cfg)  # nothing was written while it waited
    finally:
        holder.communicate("\n", timeout=10)  # the holder exits: its lock goes with it
    assert ingest_path(docs, "kb", cfg.with_overrides({"index.lock_timeout_s": 0.3}), embedder).documents == 4


def test_a_killed_writer_leaves_no_stale_lock(tmp_path: Path, cfg: Config) -> None:
    folder = HybridIndex.path_for("kb", cfg)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\n"
         "from ragbudget.index.local.lock import index_write_lock\n"
         f"with index_write_lock({str(folder)!r}, 5):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lock_path(folder).read_text() == str(holder.pid)
        with pytest.raises(IndexBusyError, match=f"pid {holder.pid}.*waited 0 s"):
            with index_write_lock(folder, 0):
                pass
    finally:
        holder.kill()  # SIGKILL: nothing runs in the holder, its pid stays in the lock file
        holder.wait(10)
    with index_write_lock(folder, 0):  # the kernel dropped the dead holder's lock: no wait
        assert lock_path(folder).read_text() == str(os.getpid())
    assert lock_path(folder).read_text() == ""


def test_two_writers_of_one_index_lose_nothing(tmp_path: Path, cfg: Config,
                                               real_embedder: SentenceTransformerEmbedder) -> None:
    # Two RAG objects (as two processes would) ingest different records into one index at once. Without
    # the writer lock each loads the empty index and the later save drops the other's records.
    rags = [RAG(cfg, embedder=real_embedder, index="kb") for _ in range(2)]
    batches = [[{"id": f"{w}-{i}", "text": f"Writer {w} record {i} about boundary layer suction {i * 7}."}
                for i in range(40)] for w in ("a", "b")]
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda rb: rb[0].ingest(rb[1]), zip(rags, batches)))
    assert [r.documents for r in reports] == [40, 40]
    idx = HybridIndex.load("kb", cfg, model_id=real_embedder.model_id)
    assert {c.doc_id for c in idx.store} == {r["id"] for b in batches for r in b}
    assert not lock_path(HybridIndex.path_for("kb", cfg)).read_text()  # no holder left behind


def test_unwritable_index_dir_is_a_clear_error(tmp_path: Path, cfg: Config, embedder: CountingEmbedder) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the index folder should be")
    bad = cfg.with_overrides({"index.dir": str(blocker / "indexes")})
    with pytest.raises(IngestError, match="cannot write to the index folder"):
        ingest_path(corpus(tmp_path / "docs"), "kb", bad, embedder)
