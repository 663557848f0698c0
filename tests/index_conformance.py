"""The conformance suite every index backend passes (``ragbudget.index.base``).

A backend's test module subclasses :class:`IndexConformance` and provides a ``backend`` fixture (a fresh,
empty :class:`~ragbudget.index.base.IndexBackend`, closed afterwards). The data is real: Cranfield
abstracts from ../shared/data, embedded by the bundled MiniLM.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ragbudget.errors import IndexBusyError, IndexNotFoundError, QueryError
from ragbudget.index.base import IndexBackend, IndexStore, JobStore
from ragbudget.index.filters import parse_filters
from ragbudget.types import Document

CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval" / "cranfield" / "corpus.jsonl"


def cranfield_docs(n: int = 40) -> list[Document]:
    if not CRANFIELD.is_file():
        pytest.skip(f"shared data not found at {CRANFIELD}")
    docs = []
    with open(CRANFIELD, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            r = json.loads(line)
            docs.append(Document(id=f"cran-{r['_id']}", text=r["text"],
                                 metadata={"source": f"/corpus/cranfield/{r['_id']}.txt", "title": r["title"],
                                           "year": 1950 + i % 20, "kind": "even" if i % 2 == 0 else "odd"}))
    return docs


class IndexConformance:
    """Behaviour every backend shares. Subclasses provide the ``backend`` fixture."""

    NAME = "conf"

    @pytest.fixture
    def filled(self, backend: IndexBackend, embedder) -> tuple[IndexStore, list[Document]]:
        docs = cranfield_docs()
        store = backend.open(self.NAME, embedder, create=True)
        store.add_documents(docs, embedder)
        return store, docs

    def test_protocols_hold(self, backend: IndexBackend, filled) -> None:
        store, _ = filled
        assert isinstance(backend, IndexBackend) and isinstance(store, IndexStore)
        assert isinstance(backend.jobs(), JobStore)

    def test_missing_index_is_a_clear_error(self, backend: IndexBackend, embedder) -> None:
        assert not backend.exists("nope") and backend.committed_version("nope") is None
        with pytest.raises(IndexNotFoundError) as err:
            backend.open("nope", embedder)
        assert err.value.fix and "ingest" in err.value.fix

    def test_committed_version_follows_writes(self, backend: IndexBackend, filled, embedder) -> None:
        store, docs = filled
        v1 = store.version
        assert backend.exists(self.NAME) and self.NAME in backend.list()
        assert backend.committed_version(self.NAME) == v1 and len(store) >= len(docs)
        store.add_documents([Document(id="extra", text="Helium boundary layers at hypersonic speed were "
                                      "measured in a shock tunnel.", metadata={"source": "/corpus/extra.txt"})],
                            embedder)
        assert store.version != v1 and backend.committed_version(self.NAME) == store.version
        again = backend.open(self.NAME, embedder)  # another process would open exactly this
        assert again.version == store.version and len(again) == len(store)
        again.close()

    def test_dense_and_sparse_find_the_document(self, filled, embedder) -> None:
        store, docs = filled
        target = docs[7]
        hits = store.search_dense(embedder.embed_query(target.text[:300]), 3)
        assert hits and hits[0][0].doc_id == target.id
        assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:]))
        words = [w for w in target.metadata["title"].split() if len(w) > 6][:3]
        sparse = store.search_sparse(" ".join(words), 5)
        assert target.id in {c.doc_id for c, _ in sparse} and all(s > 0 for _, s in sparse)
        assert store.search_sparse("the of and", 5) == []  # stop words only

    def test_get_chunks_and_idf(self, filled) -> None:
        store, docs = filled
        chunk = store.search_sparse("slipstream", 1)[0][0]
        assert [c.id for c in store.get_chunks([chunk.id, "missing"])] == [chunk.id]
        idf = store.idf(list(store.analyzer("slipstream zzzqqq")))
        assert idf[store.analyzer("slipstream")[0]] > 0 and idf[store.analyzer("zzzqqq")[0]] == 0

    def test_filters_apply_before_top_k(self, filled, embedder) -> None:
        store, docs = filled
        q = embedder.embed_query(docs[0].text[:300])
        assert store.search_dense(q, 1)[0][0].doc_id == docs[0].id
        odd = store.search_dense(q, 5, parse_filters({"kind": "odd"}))
        assert len(odd) == 5 and all(c.metadata["kind"] == "odd" for c, _ in odd)
        recent = store.search_sparse("wing lift boundary layer", 50, parse_filters({"year": {"gte": 1965}}))
        assert recent and all(c.metadata["year"] >= 1965 for c, _ in recent)
        one = store.search_dense(q, 10, parse_filters({"source": docs[3].metadata["source"]}))
        assert one and {c.doc_id for c, _ in one} == {docs[3].id}
        both = store.search_sparse("wing", 50, parse_filters({"doc_id": [docs[0].id, docs[2].id]}))
        assert {c.doc_id for c, _ in both} <= {docs[0].id, docs[2].id}
        assert store.search_dense(q, 5, parse_filters({"year": {"gt": 3000}})) == []
        with pytest.raises(QueryError):
            parse_filters({"year": {"between": [1, 2]}})

    def test_delete_by_id_and_by_source(self, backend: IndexBackend, filled, embedder) -> None:
        store, docs = filled
        v = store.version
        removed = store.delete(doc_ids=[docs[7].id])
        assert removed >= 1 and store.version != v and backend.committed_version(self.NAME) == store.version
        q = embedder.embed_query(docs[7].text[:300])
        assert docs[7].id not in {c.doc_id for c, _ in store.search_dense(q, 10)}
        assert docs[7].id not in {c.doc_id for c, _ in store.search_sparse(docs[7].metadata["title"], 50)}
        assert store.delete(sources=[docs[8].metadata["source"]]) >= 1
        assert docs[8].id not in {c.doc_id for c, _ in store.search_dense(embedder.embed_query(docs[8].text), 10)}
        v2 = store.version
        assert store.delete(doc_ids=["never-there"]) == 0 and store.version == v2  # nothing: no new version

    def test_update_in_place(self, filled, embedder) -> None:
        store, docs = filled
        n = len(store)
        new = Document(id=docs[5].id, text="Supersonic flutter of thin titanium panels was observed at "
                       "Mach 3 in the blowdown tunnel.", metadata=dict(docs[5].metadata))
        store.add_documents([new], embedder)
        hits = store.search_sparse("titanium panels flutter", 3)
        assert hits[0][0].doc_id == docs[5].id and "titanium" in hits[0][0].text
        old_words = store.search_dense(embedder.embed_query(docs[5].text[:300]), 10)
        assert all("titanium" in c.text for c, _ in old_words if c.doc_id == docs[5].id)
        assert len(store) <= n  # replaced, not appended

    def test_metadata_change_is_a_new_version(self, filled, embedder) -> None:
        store, docs = filled
        v = store.version
        changed = Document(id=docs[1].id, text=docs[1].text, metadata={**docs[1].metadata, "year": 2024})
        store.add_documents([changed], embedder)
        assert store.version != v
        got = store.search_dense(embedder.embed_query(docs[1].text), 3, parse_filters({"year": 2024}))
        assert got and got[0][0].doc_id == docs[1].id

    def test_one_writer_at_a_time(self, backend: IndexBackend, filled) -> None:
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with backend.write_lock(self.NAME, 5):
                held.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        try:
            assert held.wait(10)
            with pytest.raises(IndexBusyError):
                with backend.write_lock(self.NAME, 0.2):
                    pass
        finally:
            release.set()
            t.join()
        with backend.write_lock(self.NAME, 1):
            pass

    def test_jobs_are_shared_records(self, backend: IndexBackend) -> None:
        jobs = backend.jobs()
        jobs.put("ingest-abc", {"id": "ingest-abc", "kind": "ingest", "tenant": "t", "state": "running"})
        jobs.put("ingest-abc", {"id": "ingest-abc", "kind": "ingest", "tenant": "t", "state": "done",
                                "detail": {"chunks_added": 3}})
        other = backend.jobs()  # a fresh handle, as another worker would hold
        got = other.get("ingest-abc")
        assert got is not None and got["state"] == "done" and got["detail"] == {"chunks_added": 3}
        assert other.get("ingest-zzz") is None
        assert [j["id"] for j in other.recent(5)] == ["ingest-abc"]
