"""Fixtures and helpers for the retrieval tests (ingest, index, retrieve, eval)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from ragbudget.config import Config, load_config
from ragbudget.embed.encoder import SentenceTransformerEmbedder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CRANFIELD = DATA / "eval" / "cranfield"


def minimal_pdf(text: str) -> bytes:
    """A valid one-page PDF showing ``text`` in Helvetica (xref offsets computed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


class CountingEmbedder:
    """Wraps the real embedder and counts the texts it was asked to embed (a seam, not a fake)."""

    def __init__(self, inner: SentenceTransformerEmbedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.texts_embedded = 0
        self.queries_embedded = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts_embedded += len(texts)
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries_embedded += 1
        return self.inner.embed_query(text)


@pytest.fixture(scope="session")
def real_embedder() -> SentenceTransformerEmbedder:
    """The bundled MiniLM, loaded once per session, without a persistent cache."""
    emb = SentenceTransformerEmbedder(load_config(environ={}).embedding.model_copy(update={"cache": False}))
    emb.warm_up()
    return emb


@pytest.fixture()
def embedder(real_embedder: SentenceTransformerEmbedder) -> CountingEmbedder:
    return CountingEmbedder(real_embedder)


@pytest.fixture()
def cfg(tmp_path: Path) -> Config:
    return load_config(environ={}).with_overrides({"index.dir": str(tmp_path / "indexes"),
                                                  "embedding.cache": False})


def cranfield_subset(n_docs: int = 200) -> tuple[list[dict], list[dict], list[tuple[str, str, int]]]:
    """First ``n_docs`` Cranfield documents with the queries judged on them and their qrels."""
    if not CRANFIELD.is_dir():
        pytest.skip(f"Cranfield data not found at {CRANFIELD}")
    docs = [json.loads(line) for line in (CRANFIELD / "corpus.jsonl").read_text().splitlines()[:n_docs]]
    ids = {d["_id"] for d in docs}
    rows = [ln.split("\t") for ln in (CRANFIELD / "qrels" / "test.tsv").read_text().splitlines()[1:] if ln.strip()]
    qrels = [(q, d, int(s)) for q, d, s in rows if d in ids]
    judged = {q for q, _, _ in qrels}
    queries = [json.loads(line) for line in (CRANFIELD / "queries.jsonl").read_text().splitlines()]
    return docs, [q for q in queries if q["_id"] in judged], qrels


def write_beir(folder: Path, docs: list[dict], queries: list[dict], qrels: list[tuple[str, str, int]]) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels))
    return folder
