"""The fast local index (format 2): bm25s scoring equals the rank-bm25 reference on the shared collections;
ingests append segments (unchanged chunks never rewritten, FAISS grown in place), deletes mask rows until a
compaction, readers reuse segments across versions, and a format-1 index still loads and is converted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from ragbudget.config import BM25Config, Config, FaissConfig
from ragbudget.index import DenseIndex, HybridIndex, SparseIndex
from ragbudget.index.local.backend import LocalBackend
from ragbudget.types import Document

from fixtures_retrieval import CountingEmbedder, cfg, embedder, real_embedder  # noqa: F401


@pytest.mark.parametrize("name", ["cranfield", "cisi"])
def test_bm25s_top10_equals_rank_bm25_on_shared_collections(shared_data: Path, name: str) -> None:
    folder = shared_data / "eval" / name
    docs = [json.loads(line)["text"] for line in open(folder / "corpus.jsonl", encoding="utf-8")]
    queries = [json.loads(line)["text"] for line in open(folder / "queries.jsonl", encoding="utf-8")]
    sparse = SparseIndex(BM25Config())
    terms = sparse.analyze_many(docs)
    sparse.rebuild(terms)
    reference = BM25Okapi(terms, k1=1.2, b=0.75)
    differ = 0
    for q in queries:
        ref = reference.get_scores(sparse.analyzer(q))
        want = [int(i) for i in np.argsort(-ref, kind="stable")[:10] if ref[i] > 0]
        got = sparse.search(q, 10)
        assert np.allclose([s for _, s in got], ref[[r for r, _ in got]], rtol=1e-4, atol=1e-4)
        # only exact score ties may order differently: compare both rankings with ties put in id order
        def canon(pairs: list[tuple[int, float]]) -> list[int]:
            return [r for r, _ in sorted(pairs, key=lambda p: (-round(float(p[1]), 4), p[0]))]

        differ += canon(got) != canon([(i, ref[i]) for i in want])
    assert differ <= len(queries) // 100, f"{differ} of {len(queries)} queries ranked differently"
    idf = sparse.idf(["flow", "zzznotaterm"])
    assert idf["zzznotaterm"] == 0.0 and abs(idf["flow"] - max(reference.idf["flow"], 0)) < 1e-9


def _docs(texts: dict[str, str]) -> list[Document]:
    return [Document(id=k, text=v, metadata={"source": f"{k}.txt"}) for k, v in texts.items()]


TEXTS = {"a": "Swept wings delay compressibility drag at high subsonic speed.",
         "b": "Heat transfer to a blunt body in hypersonic flow peaks at the stagnation point.",
         "c": "Panel flutter of thin plates appears at supersonic speeds.",
         "d": "Oblique shock waves form at a compression corner."}


def _files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in folder.iterdir() if p.name.startswith("seg-")}


def test_ingest_appends_a_segment_and_never_rewrites_unchanged_chunks(cfg: Config, embedder: CountingEmbedder) -> None:
    idx = HybridIndex.create("kb", cfg, model_id=embedder.model_id, dim=384)
    idx.add_documents(_docs({k: TEXTS[k] for k in "ab"}), embedder)
    first = _files(idx.folder)
    assert len(first) == 3  # chunks, vectors, terms of one segment
    faiss_before = idx.dense._index
    idx.add_documents(_docs({"c": TEXTS["c"]}), embedder)
    assert idx.dense._index is faiss_before and len(idx.dense) == 3  # grown in place, not rebuilt
    after = _files(idx.folder)
    assert {k: after[k] for k in first} == first and len(after) == 6  # old files untouched, one new segment
    loaded = HybridIndex.load("kb", cfg, model_id=embedder.model_id)
    assert len(loaded.segments) == 2 and len(loaded) == 3
    assert loaded.search_dense(embedder.embed_query("flutter of plates"), 1)[0][0].doc_id == "c"
    assert loaded.search_sparse("stagnation point", 1)[0][0].doc_id == "b"


def test_deletes_mask_rows_until_compaction(cfg: Config, embedder: CountingEmbedder) -> None:
    idx = HybridIndex.create("kb", cfg, model_id=embedder.model_id, dim=384)
    for k, v in TEXTS.items():
        idx.add_documents(_docs({k: v}), embedder)
    assert len(idx.segments) == 4
    assert idx.delete(doc_ids=["d"]) == 1  # 1 of 4 rows dead: at the threshold, no compaction yet
    loaded = HybridIndex.load("kb", cfg)
    assert len(loaded) == 3 and loaded.info()["deleted_rows"] == 1 and len(loaded.segments) == 4
    hits = loaded.search_dense(embedder.embed_query("oblique shock waves at a compression corner"), 10)
    assert "d" not in {c.doc_id for c, _ in hits} and len(hits) == 3
    assert loaded.search_sparse("oblique corner", 10) == []
    assert loaded.delete(doc_ids=["c"]) == 1  # 2 of 4 dead: compacted into one segment
    again = HybridIndex.load("kb", cfg)
    assert len(again.segments) == 1 and again.info()["deleted_rows"] == 0 and len(again) == 2
    assert {c.doc_id for c, _ in again.search_dense(embedder.embed_query("wings"), 10)} == {"a", "b"}
    # the previous version's files stay for a reader mid-load; the next write removes the superseded ones
    again.add_documents(_docs({"d": TEXTS["d"]}), embedder)
    names = {p.name.split(".")[0] for p in again.folder.iterdir() if p.name.startswith("seg-")}
    assert names == {s.name for s in again.segments} and len(names) == 2


def test_readers_reuse_segments_across_versions(cfg: Config, embedder: CountingEmbedder) -> None:
    idx = HybridIndex.create("kb", cfg, model_id=embedder.model_id, dim=384)
    idx.add_documents(_docs({"a": TEXTS["a"]}), embedder)
    backend = LocalBackend(cfg)
    v1 = backend.open("kb", embedder)
    idx.add_documents(_docs({"b": TEXTS["b"]}), embedder)
    v2 = backend.open("kb", embedder)
    assert v2.version != v1.version and v2.segments[0] is v1.segments[0] and len(v2) == 2


def test_dense_add_matches_a_fresh_build_for_every_kind() -> None:
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((1200, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    for kind in ("flat", "hnsw", "ivf"):
        fc = FaissConfig(kind=kind, ivf_nlist=8, ivf_nprobe=8)
        grown = DenseIndex(16, fc, vecs[:200])  # ivf: too few to train, flat until the add
        grown.add(vecs[200:])
        assert grown.kind == kind and len(grown) == 1200
        assert grown.search(vecs[1100], 1)[0][0] == 1100
        grown.set_dead(np.array([1100]))
        assert 1100 not in [r for r, _ in grown.search(vecs[1100], 5)]


def test_format_1_index_loads_and_the_next_write_converts_it(tmp_path: Path, cfg: Config,
                                                               embedder: CountingEmbedder) -> None:
    idx = HybridIndex.create("kb", cfg, model_id=embedder.model_id, dim=384)
    idx.add_documents(_docs({k: TEXTS[k] for k in "abc"}), embedder)
    folder = idx.folder
    # Write the same content the way format 1 stored it.
    rows = [c for s in idx.segments for c in s.chunks]
    with open(folder / "chunks.jsonl", "w", encoding="utf-8") as f:
        for c in rows:
            f.write(json.dumps({"id": c.id, "doc_id": c.doc_id, "text": c.text, "position": c.position,
                                "n_tokens": c.n_tokens, "metadata": dict(c.metadata)}) + "\n")
    np.save(folder / "vectors.npy", idx.dense.vectors)
    (folder / "bm25_tokens.json").write_text(json.dumps([t for s in idx.segments for t in s.terms()]))
    (folder / "sources.json").write_text("{}")
    m = json.loads((folder / "manifest.json").read_text())
    m.update(format_version=1, files={})
    (folder / "manifest.json").write_text(json.dumps(m))
    for p in folder.iterdir():
        if p.name.startswith(("seg-", "bm25-", "sources-")):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    old = HybridIndex.load("kb", cfg, model_id=embedder.model_id)
    assert len(old) == 3 and old.search_sparse("stagnation point", 1)[0][0].doc_id == "b"
    old.add_documents(_docs({"d": TEXTS["d"]}), embedder)
    new = HybridIndex.load("kb", cfg)
    assert new.manifest.format_version == 2 and len(new) == 4 and not (folder / "chunks.jsonl").exists()


def test_deleting_every_document_leaves_an_empty_loadable_index(cfg: Config, embedder: CountingEmbedder) -> None:
    idx = HybridIndex.create("kb", cfg, model_id=embedder.model_id, dim=384)
    idx.add_documents(_docs({k: TEXTS[k] for k in "ab"}), embedder)
    assert idx.delete(doc_ids=["a", "b"]) == 2
    empty = HybridIndex.load("kb", cfg)
    assert len(empty) == 0 and empty.search_dense(embedder.embed_query("wings"), 5) == []
    assert empty.search_sparse("wings", 5) == [] and empty.idf(["wing"]) == {"wing": 0.0}
    empty.add_documents(_docs({k: TEXTS[k] for k in "acd"}), embedder)  # (≤ 2 documents: Okapi idf ≤ 0)
    assert [c.doc_id for c, _ in HybridIndex.load("kb", cfg).search_sparse("flutter", 5)] == ["c"]


def test_disk_full_mid_commit_is_a_clear_error_and_the_previous_version_serves(cfg: Config, embedder: CountingEmbedder,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from ragbudget.errors import IngestError
    from ragbudget.index.local import segments

    idx = HybridIndex.create("kb", cfg, model_id=embedder.model_id, dim=384)
    idx.add_documents(_docs({k: TEXTS[k] for k in "abc"}), embedder)
    before = HybridIndex.load("kb", cfg).version
    files = sorted(p.name for p in idx.folder.iterdir())

    def full(path, obj):  # the disk fills while the new version's files are written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segments, "write_json", full)
    with pytest.raises(IngestError) as err:
        idx.add_documents(_docs({"d": TEXTS["d"]}), embedder)
    assert "No space left" in str(err.value) and "free disk space" in err.value.fix
    monkeypatch.undo()
    assert HybridIndex.load("kb", cfg).version == before
    assert sorted(p.name for p in idx.folder.iterdir()) == files  # nothing half-written left behind
    again = HybridIndex.load("kb", cfg, model_id=embedder.model_id)
    again.add_documents(_docs({"d": TEXTS["d"]}), embedder)  # the next write succeeds
    assert len(HybridIndex.load("kb", cfg)) == 4
