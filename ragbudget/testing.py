"""What ships for testing code built on ragbudget, the way Haystack ships its document-store tests.

* :class:`ScriptedGenerator` — a generator that plays a script (answers, errors, pauses, partial output,
  or one word per requested token): the seam for testing routing, fallbacks, cancellation and accounting
  without a model.
* :class:`IndexConformance` — the behaviour every index backend shares (protocols, versions, dense and
  sparse search, filters before top-k, deletes, updates, one writer, shared job records). A backend's test
  module subclasses it and provides ``backend``, ``embedder`` and ``documents`` fixtures.

Needs pytest (imported here, not by ``import ragbudget``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pytest

from .errors import IndexBusyError, IndexNotFoundError, PartialGenerationError, QueryError
from .index.base import IndexBackend, IndexStore, JobStore
from .index.filters import parse_filters
from .llm.base import BaseGenerator, StreamState
from .types import Document, Prompt, Scored

WORDS = "<words>"  # a script step: one word ("w0 ", "w1 ", ...) per requested token


class ScriptedGenerator(BaseGenerator):
    """Plays ``script``, one step per call (the last step repeats). A step is a string (the answer, one
    piece per word), an exception (raised), ``("sleep", seconds, step)``, ``("partial", text)`` (yields
    ``text`` then breaks with a :class:`~ragbudget.errors.PartialGenerationError`) or :data:`WORDS`.
    ``word_delay_s`` paces every word. Records the prompts (``calls``), and for the current call the words
    requested and produced, with ``running`` / ``finished`` events."""

    name = "scripted"

    def __init__(self, *script: object, model: str = "scripted", word_delay_s: float = 0.0) -> None:
        super().__init__(model=model)
        self.script = list(script) or [WORDS]
        self.word_delay_s = word_delay_s
        self.calls: list[Prompt] = []
        self.produced = 0
        self.requested = 0
        self.running = threading.Event()
        self.finished = threading.Event()

    def _pieces(self, prompt: Prompt, state: StreamState, *, max_tokens: int, temperature: float,
                stop: Sequence[str] | None, context: Sequence[Scored] | None, top_p: float | None = None,
                seed: int | None = None) -> Iterator[str]:
        self.calls.append(prompt)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        self.produced, self.requested = 0, max_tokens
        self.finished.clear()
        self.running.set()
        try:
            if isinstance(step, tuple) and step[0] == "sleep":
                time.sleep(step[1])
                step = step[2]
            if isinstance(step, tuple) and step[0] == "partial":
                yield step[1]
                raise PartialGenerationError("broke", partial_text=step[1])
            if isinstance(step, BaseException):
                raise step
            state.prompt_tokens = prompt.total_tokens
            words = [f"w{i}" for i in range(max_tokens)] if step == WORDS else str(step).split(" ")
            for w in words:
                if self.word_delay_s:
                    time.sleep(self.word_delay_s)
                self.produced += 1
                yield w + " "
        finally:
            self.running.clear()
            self.finished.set()


def conformance_documents(records: Iterable[Mapping[str, Any]], prefix: str = "doc") -> list[Document]:
    """Documents for :class:`IndexConformance` from records with ``_id``, ``title`` and ``text`` (a BEIR
    corpus line): each gets a source path and the ``year`` / ``kind`` metadata the filter tests use."""
    docs = []
    for i, r in enumerate(records):
        docs.append(Document(id=f"{prefix}-{r['_id']}", text=r["text"],
                             metadata={"source": f"/corpus/{prefix}/{r['_id']}.txt", "title": r.get("title", ""),
                                       "year": 1950 + i % 20, "kind": "even" if i % 2 == 0 else "odd"}))
    return docs


class IndexConformance:
    """Behaviour every backend shares. Subclasses provide three fixtures: ``backend`` (a fresh, empty
    :class:`~ragbudget.index.base.IndexBackend`, closed afterwards), ``embedder`` and ``documents`` (about 40
    real documents, see :func:`conformance_documents`)."""

    NAME = "conf"

    @pytest.fixture
    def filled(self, backend: IndexBackend, embedder, documents) -> tuple[IndexStore, list[Document]]:
        docs = list(documents)
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
