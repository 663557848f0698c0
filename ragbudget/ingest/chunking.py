"""Token-aware chunking (llama-index splitters with the tiktoken tokenizer) and stable chunk ids.

A chunk id is ``sha256(doc_id, text, n)`` where ``n`` counts earlier chunks of the same document with
identical text. Position is not hashed, and chunk boundaries are anchored to content: paragraphs are
packed into groups up to ``chunk_size``, and a group at least half full also closes after an "anchor"
paragraph (chosen by its hash, about one in four). Each group is then split by the llama-index splitter. An edit therefore
changes only the chunks of its own group (and at worst those up to the next anchor); everything else
keeps its id and its stored vector.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

from llama_index.core.node_parser import SentenceSplitter, TokenTextSplitter

from ..config import ChunkingConfig
from ..kernels.tokens import Tokenizer
from ..types import Chunk, Document


def chunk_id(doc_id: str, text: str, occurrence: int = 0) -> str:
    h = hashlib.sha256()
    for part in (doc_id, text, str(occurrence)):
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:32]


def document_text(doc: Document) -> str:
    """Text that gets indexed: ``title\\n\\ntext`` for records with a title, else the text."""
    title = str(doc.metadata.get("title") or "")
    if "record_id" in doc.metadata and title.strip():
        return f"{title}\n\n{doc.text}" if doc.text.strip() else title
    return doc.text


_PARAGRAPH = re.compile(r"\n[ \t]*\n")
ANCHOR_EVERY = 4


def _is_anchor(paragraph: str) -> bool:
    return hashlib.blake2b(paragraph.encode("utf-8"), digest_size=2).digest()[0] % ANCHOR_EVERY == 0


class Chunker:
    """Split documents into :class:`~ragbudget.types.Chunk` with position, token count and citation metadata."""

    def __init__(self, config: ChunkingConfig, tokenizer: Tokenizer) -> None:
        self.config = config
        self.tokenizer = tokenizer
        cls = SentenceSplitter if config.splitter == "sentence" else TokenTextSplitter
        self._splitter = cls(chunk_size=config.chunk_size, chunk_overlap=config.chunk_overlap,
                             tokenizer=tokenizer.encode)

    def settings(self) -> dict[str, object]:
        return {"splitter": self.config.splitter, "chunk_size": self.config.chunk_size,
                "chunk_overlap": self.config.chunk_overlap, "tokenizer": self.tokenizer.name}

    def chunk(self, doc: Document) -> list[Chunk]:
        pieces = [p for g in self._groups(document_text(doc)) for p in self._splitter.split_text(g) if p.strip()]
        counts = self.tokenizer.count_many(pieces) if pieces else []
        seen: dict[str, int] = {}
        out: list[Chunk] = []
        meta = {k: v for k, v in doc.metadata.items()}
        for pos, (piece, n) in enumerate(zip(pieces, counts)):
            occ = seen.get(piece, 0)
            seen[piece] = occ + 1
            out.append(Chunk(id=chunk_id(doc.id, piece, occ), doc_id=doc.id, text=piece, position=pos,
                             n_tokens=n, metadata={**meta, "position": pos}))
        return out

    def _groups(self, text: str) -> list[str]:
        """Paragraph groups of about ``chunk_size`` tokens. A group closes when the next paragraph would
        overflow it (once it is at least half full: a short heading stays with its text) or after an
        anchor paragraph; the splitter then cuts any group still over ``chunk_size``."""
        groups: list[str] = []
        cur: list[str] = []
        size = 0
        for para in (p.strip() for p in _PARAGRAPH.split(text)):
            if not para:
                continue
            n = self.tokenizer.count(para) + 2
            if cur and size + n > self.config.chunk_size and size >= self.config.chunk_size // 2:
                groups.append("\n\n".join(cur))
                cur, size = [], 0
            cur.append(para)
            size += n
            if _is_anchor(para) and size >= self.config.chunk_size // 2:
                groups.append("\n\n".join(cur))
                cur, size = [], 0
        if cur:
            groups.append("\n\n".join(cur))
        return groups

    def chunk_many(self, docs: Sequence[Document]) -> list[Chunk]:
        return [c for d in docs for c in self.chunk(d)]
