"""Loaders and chunking: real files of every supported kind, bad files skipped with reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbudget.config import ChunkingConfig
from ragbudget.errors import IngestError
from ragbudget.ingest import Chunker, chunk_id, load_path
from ragbudget.kernels.tokens import Tokenizer
from ragbudget.types import Document

from fixtures_retrieval import minimal_pdf


def make_mixed_folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plain.txt").write_text("Wind tunnels measure lift and drag on scale models.\n", encoding="utf-8")
    (root / "guide.md").write_text("# Boundary layers\n\nThe boundary layer thickens downstream.\n")
    (root / "page.html").write_text("<html><head><title>Shock waves</title><style>p{}</style></head>"
                                    "<body><h1>Shocks</h1><p>A normal shock slows supersonic flow.</p>"
                                    "<script>var x=1;</script></body></html>")
    (root / "paper.pdf").write_bytes(minimal_pdf("Panel flutter appears at high dynamic pressure"))
    (root / "blob.txt").write_bytes(b"\x00\x01\x02binary\x00data")
    (root / "empty.md").write_text("   \n")
    (root / "latin.txt").write_bytes("Caf\xe9 au lait near the sonic boom".encode("latin-1"))
    (root / "image.png").write_bytes(b"\x89PNG\r\n")
    sub = root / "sub"
    sub.mkdir(exist_ok=True)
    (sub / "deep.txt").write_text("Nested folders are walked too.")
    return root


def test_mixed_folder_loads_good_files_and_lists_bad_ones(tmp_path: Path) -> None:
    docs, report = load_path(make_mixed_folder(tmp_path / "docs"))
    by_name = {Path(d.id).name: d for d in docs}
    assert set(by_name) == {"plain.txt", "guide.md", "page.html", "paper.pdf", "latin.txt", "deep.txt"}
    assert by_name["guide.md"].metadata["title"] == "Boundary layers"
    assert by_name["page.html"].metadata["title"] == "Shock waves"
    assert "normal shock" in by_name["page.html"].text and "var x" not in by_name["page.html"].text
    assert "Panel flutter" in by_name["paper.pdf"].text
    assert by_name["plain.txt"].metadata["title"] == "plain"
    assert by_name["plain.txt"].metadata["source"].endswith("plain.txt")
    assert by_name["latin.txt"].text == "Café au lait near the sonic boom"  # detected, not U+FFFD (issue 13)
    assert any("latin.txt" in n and "UTF-8" in n for n in report.notes)
    skipped = {Path(w).name: why for w, why in report.skipped}
    assert "binary" in skipped["blob.txt"]
    assert "empty" in skipped["empty.md"]
    assert "unsupported" in skipped["image.png"]
    assert report.files_read == 6


def test_jsonl_records_with_a_malformed_line(tmp_path: Path) -> None:
    f = tmp_path / "recs.jsonl"
    f.write_text("\n".join([
        json.dumps({"_id": "a", "title": "Alpha", "text": "first record", "year": 1962}),
        '{"_id": "b", "text": "broken',
        json.dumps({"id": "c", "text": "third record"}),
        json.dumps({"_id": "d"}),
    ]) + "\n")
    docs, report = load_path(f)
    assert [d.id for d in docs] == ["a", "c"]
    assert docs[0].metadata["title"] == "Alpha" and docs[0].metadata["year"] == 1962
    assert docs[0].metadata["source"] == str(f)
    where = [w for w, _ in report.skipped]
    assert f"{f}:2" in where and f"{f}:4" in where
    assert report.records_read == 2


def test_missing_and_empty_folders_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="path not found") as e:
        load_path(tmp_path / "nope")
    assert "fix:" in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="folder is empty"):
        load_path(tmp_path / "empty")


def _long_text(n_paragraphs: int = 12) -> str:
    return "\n\n".join(
        f"Paragraph {i} discusses topic {i}. " + " ".join(f"Sentence {j} about subject {i} and item {j}."
                                                          for j in range(25))
        for i in range(n_paragraphs))


def test_chunks_respect_size_and_ids_are_stable() -> None:
    tok = Tokenizer("cl100k_base")
    chunker = Chunker(ChunkingConfig(chunk_size=128, chunk_overlap=16), tok)
    doc = Document(id="d1", text=_long_text(), metadata={"source": "d1.txt", "title": "T"})
    chunks = chunker.chunk(doc)
    assert len(chunks) > 5
    assert all(c.n_tokens == tok.count(c.text) <= 128 for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert all(c.metadata["source"] == "d1.txt" and c.title == "T" for c in chunks)
    assert [c.id for c in chunker.chunk(doc)] == [c.id for c in chunks]
    assert chunks[0].id == chunk_id("d1", chunks[0].text, 0)


def test_editing_one_paragraph_changes_only_nearby_chunk_ids() -> None:
    chunker = Chunker(ChunkingConfig(chunk_size=128, chunk_overlap=0), Tokenizer())
    text = _long_text()
    before = [c.id for c in chunker.chunk(Document(id="d", text=text))]
    edited = text.replace("Sentence 3 about subject 9 and item 3.", "A brand new sentence about wings.")
    after = [c.id for c in chunker.chunk(Document(id="d", text=edited))]
    changed = set(after) - set(before)
    assert 1 <= len(changed) <= 3
    assert len(set(before) & set(after)) >= len(before) - 3


def test_record_title_is_indexed_with_text() -> None:
    chunker = Chunker(ChunkingConfig(), Tokenizer())
    doc = Document(id="7", text="body words", metadata={"title": "Heading", "record_id": "7", "source": "c.jsonl"})
    (c,) = chunker.chunk(doc)
    assert c.text.startswith("Heading") and "body words" in c.text
    file_doc = Document(id="f.md", text="just text", metadata={"title": "f"})
    assert chunker.chunk(file_doc)[0].text == "just text"


@pytest.mark.parametrize("warm", [True, False])
def test_ingest_warms_every_sentence_so_trimming_never_runs_the_model(tmp_path: Path, shared_data: Path,
                                                                     warm: bool) -> None:
    """After an ingest, embedding the sentences of its chunks (what query-time trimming does) finds every one
    cached: no forward pass. The report counts them, and its seconds include that warm-up."""
    from ragbudget.config import Config
    from ragbudget.index.names import default_embedder, ingest_tokenizer
    from ragbudget.retrieval.registry import IndexRegistry
    from ragbudget.kernels.sentences import split_sentences

    rows = (shared_data / "eval" / "cisi" / "corpus.jsonl").read_text().splitlines()[:12]
    data = tmp_path / "twelve.jsonl"
    data.write_text("\n".join(rows) + "\n")
    cfg = Config().with_overrides({"index.dir": str(tmp_path / "ix"), "embedding.warm_sentences": warm})
    emb = default_embedder(cfg)
    reg = IndexRegistry(cfg, emb)
    try:
        report = reg.ingest(str(data), "x")
        docs, _ = load_path(str(data))
        chunks = Chunker(cfg.chunking, ingest_tokenizer(cfg)).chunk_many(docs)  # what the ingest indexed
        sents = list(dict.fromkeys(s for c in chunks for s in split_sentences(c.text)))
        assert len(chunks) == report.chunks_added
        assert report.chunks_added >= 12 and report.seconds > 0
        assert report.sentences_warmed == (len(sents) if warm else 0)
        passes: list[int] = []
        real = emb._encode
        emb._encode = lambda batch: (passes.append(len(batch)), real(batch))[1]  # count, then run the model
        emb._memory.clear()  # only the persistent cache a fresh process would have
        emb.embed(sents)
        assert (passes == []) if warm else (sum(passes) > 0)
    finally:
        reg.close()


def test_an_eval_folder_ingests_its_corpus_not_its_questions(shared_data: Path, tmp_path: Path) -> None:
    squad = shared_data / "eval" / "squad2"
    corpus = sum(1 for line in (squad / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
    docs, report = load_path(squad)
    assert len(docs) == corpus  # 411 paragraphs, not 411 + the 242 questions
    skipped = {Path(where).name: why for where, why in report.skipped}
    assert "questions.jsonl" in skipped and "evaluation file" in skipped["questions.jsonl"]
    # a BEIR folder: queries.jsonl and qrels/ are skipped the same way
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "Lift rises with angle."}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what raises lift"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    docs, report = load_path(beir)
    assert [d.text for d in docs] == ["Lift rises with angle."]
    assert {Path(w).name for w, _ in report.skipped} == {"queries.jsonl", "test.tsv"}
    # without a corpus.jsonl beside it, a file called questions.jsonl is ordinary records
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "questions.jsonl").write_text(json.dumps({"_id": "x", "text": "A document about questions."}) + "\n")
    docs, _ = load_path(plain)
    assert [d.text for d in docs] == ["A document about questions."]


def test_records_given_as_documents_or_mappings_are_counted_as_read() -> None:
    """The HTTP ingest hands Documents to the index: its job status said records_read 0."""
    from ragbudget.retrieval.registry import records_to_documents
    from ragbudget.types import Document

    docs, report = records_to_documents([Document(id="a", text="first record"),
                                         {"id": "b", "text": "second record"}, Document(id="c", text="third")])
    assert sorted(d.id for d in docs) == ["a", "b", "c"] and report.records_read == 3
