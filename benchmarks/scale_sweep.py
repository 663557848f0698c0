"""Scale sweep of the index backends (issue 17): local files, or an embedded PostgreSQL 18 + pgvector.

    .venv/bin/python benchmarks/scale_sweep.py --backend postgres --sizes 10000,100000 --queries 200
    .venv/bin/python benchmarks/scale_sweep.py --backend local --sizes 10000,100000 --queries 200
    .venv/bin/python benchmarks/scale_sweep.py --backend postgres --sizes 100000 --ef-search 40,100,200,400
    .venv/bin/python benchmarks/scale_sweep.py --ndcg            # sparse nDCG@10: postgres BM25 vs rank-bm25

Data: real text from the shared Cranfield + CISI corpora, cut into ~60-word pieces and repeated with
variation (each repeat drops a different word and gets a repeat tag) up to N chunks. Vectors are synthetic
and clustered (384-d, 256 clusters, seeded by the text), so no model runs. Measures: ingest chunks/s (one
bulk transaction, then an incremental write of 1000 chunks), dense / sparse / hybrid (dense + sparse, as the
retriever calls them) P50/P99 over distinct queries, HNSW recall@10 against exact inner-product search, and
the resident memory of a separate serving process that opens the index and runs the same queries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragbudget.config import Config  # noqa: E402
from ragbudget.eval.ranking import dedupe, ndcg_at_k  # noqa: E402
from ragbudget.kernels.stats import percentile  # noqa: E402
from ragbudget.types import Document  # noqa: E402

EVAL = REPO.parent / "shared" / "data" / "eval"
DIM, CLUSTERS = 384, 256
BUILD_MEMORY_MB = 1024  # --build-memory-mb
HNSW: dict = {}  # --hnsw-m, --ef-construction (the config's defaults when unset)


class ClusteredEmbedder:
    """Text → a fixed clustered unit vector (seeded by the text's hash): deterministic, no model."""

    model_id, dim = "synthetic-clustered-384", DIM

    def __init__(self) -> None:
        self.centers = np.random.default_rng(7).standard_normal((CLUSTERS, DIM)).astype(np.float32)

    def embed(self, texts):
        out = np.empty((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            h = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            rng = np.random.default_rng(h)
            v = self.centers[h % CLUSTERS] + 0.6 * rng.standard_normal(DIM).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out

    def embed_query(self, text):
        return self.embed([text])[0]


def pieces() -> list[str]:
    out = []
    for name in ("cranfield", "cisi"):
        with open(EVAL / name / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                words = json.loads(line)["text"].split()
                out += [" ".join(words[i:i + 60]) for i in range(0, len(words), 60) if len(words[i:i + 60]) > 10]
    return out


def corpus(n: int) -> list[Document]:
    base = pieces()
    docs = []
    for i in range(n):
        rep, j = divmod(i, len(base))
        words = base[j].split()
        if rep:
            del words[rep % len(words)]
            words.append(f"rep{rep}")
        docs.append(Document(id=f"c{i}", text=" ".join(words),
                             metadata={"source": f"/sweep/{j}.txt", "year": 1950 + i % 70, "rep": rep}))
    return docs


def start_server(folder: str):
    from ragbudget.index.postgres.embedded import EmbeddedPostgres
    server = EmbeddedPostgres(folder, database="sweep")
    server.start()
    return server


def cfg_for(dsn: str | None, tmp: str, ef_search: int | None = None, per_term: int | None = None) -> Config:
    if dsn is None:  # local
        return Config().with_overrides({"index.backend": "local", "index.dir": tmp, "embedding.cache": False})
    over: dict = {"index.postgres.hnsw_ef_search": ef_search} if ef_search else {}
    if per_term is not None:
        over["index.postgres.sparse_postings_per_term"] = per_term
    over["index.postgres.build_memory_mb"] = BUILD_MEMORY_MB
    over.update({f"index.postgres.{k}": v for k, v in HNSW.items()})
    return Config().with_overrides({"index.backend": "postgres", "index.dsn": dsn, "index.dir": tmp,
                                    "index.postgres.schema_name": "sweep", "index.postgres.statement_timeout_ms": 0,
                                    **over})


def make_backend(dsn: str | None, tmp: str, ef_search: int | None = None, per_term: int | None = None):
    from ragbudget.index.backends import make_backend as make
    return make(cfg_for(dsn, tmp, ef_search, per_term))


def query_set(docs: list[Document], emb: ClusteredEmbedder, q: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(docs), size=q, replace=False)
    vecs, texts = [], []
    for p in picks:
        v = emb.embed([docs[p].text])[0] + 0.3 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM) * 4
        vecs.append((v / np.linalg.norm(v)).astype(np.float32))
        words = [w for w in docs[p].text.split() if len(w) > 4]
        texts.append(" ".join(rng.choice(words, size=min(4, len(words)), replace=False)))
    return np.stack(vecs), texts


def timed(fn, items) -> tuple[list[float], list]:
    ms, out = [], []
    for it in items:
        t = time.perf_counter()
        out.append(fn(it))
        ms.append((time.perf_counter() - t) * 1000)
    return ms, out


def serve_probe(dsn: str | None, tmp: str, q: int, ef_search: int | None = None) -> dict:
    """In this process: open the index and run the queries (what a serving process holds)."""
    emb = ClusteredEmbedder()
    backend = make_backend(dsn, tmp, ef_search)
    t = time.perf_counter()
    store = backend.open("sweep", emb)
    open_s = time.perf_counter() - t
    n = len(store)
    docs = corpus(n)
    vecs, texts = query_set(docs, emb, q)
    dense, _ = timed(lambda v: store.search_dense(v, 10), vecs)
    sparse, _ = timed(lambda t: store.search_sparse(t, 10), texts)
    hybrid, _ = timed(lambda i: (store.search_dense(vecs[i], 10), store.search_sparse(texts[i], 10)), range(q))
    del docs
    rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
    backend.close()
    return {"rss_mb": round(rss, 1), "open_s": round(open_s, 2), **{f"{k}_p{p}": round(percentile(v, p), 2)
                                        for k, v in (("dense", dense), ("sparse", sparse), ("hybrid", hybrid))
                                        for p in (50, 99)}}


def sweep(size: int, q: int, folder: str, kind: str, ef_list: list[int]) -> dict:
    emb = ClusteredEmbedder()
    server = start_server(os.path.join(folder, f"pg{size}")) if kind == "postgres" else None
    dsn = server.dsn() if server is not None else None
    folder = os.path.join(folder, f"{kind}{size}")
    try:
        backend = make_backend(dsn, folder)
        docs = corpus(size)
        store = backend.open("sweep", emb, create=True)
        t = time.perf_counter()
        store.add_documents(docs, emb)
        bulk_s = time.perf_counter() - t
        more = [Document(id=f"x{i}", text=d.text + " appended", metadata=dict(d.metadata))
                for i, d in enumerate(docs[:1000])]
        t = time.perf_counter()
        store.add_documents(more, emb)
        incr_s = time.perf_counter() - t
        vecs, _ = query_set(docs, emb, q)
        all_docs = docs + more
        matrix = emb.embed([d.text for d in all_docs])
        exact = np.argsort(-(vecs @ matrix.T), axis=1)[:, :10]
        recall_by_ef, dense_ms_by_ef = {}, {}
        for ef in ef_list or [0]:
            if ef:
                backend.close()
                backend = make_backend(dsn, folder, ef)
                store = backend.open("sweep", emb)
            recall = []
            ef_ms, found = timed(lambda v: store.search_dense(v, 10), vecs)
            for i, res in enumerate(found):
                got = {c.doc_id for c, _ in res}
                recall.append(len(got & {all_docs[j].id for j in exact[i]}) / 10)
            recall_by_ef[ef or "default"] = round(float(np.mean(recall)), 3)
            dense_ms_by_ef[ef or "default"] = [round(percentile(ef_ms, 50), 2), round(percentile(ef_ms, 99), 2)]
        sparse_vs_exact = {}
        if kind == "postgres":  # impact-ordered sparse (the default) against reading every posting
            exact_backend = make_backend(dsn, folder, per_term=0)
            exact_store = exact_backend.open("sweep", emb)
            _, texts = query_set(docs, emb, q)
            ems, eres = timed(lambda t: exact_store.search_sparse(t, 10), texts)
            tms, tres = timed(lambda t: store.search_sparse(t, 10), texts)
            ids = [({c.id for c, _ in e}, {c.id for c, _ in t}) for e, t in zip(eres, tres)]
            sparse_vs_exact = {"sparse_exact_p50": round(percentile(ems, 50), 2),
                               "sparse_exact_p99": round(percentile(ems, 99), 2),
                               "sparse_impact_p50": round(percentile(tms, 50), 2),
                               "sparse_impact_p99": round(percentile(tms, 99), 2),
                               "sparse_top10_overlap": round(float(np.mean([len(e & t) / max(len(e), 1)
                                                                            for e, t in ids])), 4),
                               "sparse_same_top10": round(float(np.mean([e == t for e, t in ids])), 4)}
            exact_backend.close()
        flt = []
        from ragbudget.index.filters import parse_filters
        f = parse_filters({"year": {"gte": 2010}})
        fms, fres = timed(lambda v: store.search_dense(v, 10, f), vecs)
        flt = [len(r) for r in fres]
        reference = {}
        if kind == "local" and size <= 200_000:  # the rank-bm25 reference (its per-document dicts: GBs at 1M)
            from rank_bm25 import BM25Okapi
            rows = [store.analyzer(c.text) for c in store.store]
            t = time.perf_counter()
            ref = BM25Okapi(rows, k1=1.2, b=0.75)
            build_s = time.perf_counter() - t
            _, texts = query_set(docs, emb, q)
            rms, _ = timed(lambda t: ref.get_scores(store.analyzer(t)), texts[:50])
            reference = {"rank_bm25_build_s": round(build_s, 2), "rank_bm25_sparse_p50": round(percentile(rms, 50), 2),
                         "rank_bm25_sparse_p99": round(percentile(rms, 99), 2)}
            del ref, rows
        backend.close()
        del matrix, docs, all_docs
        probe_ef = ["--probe-ef-search", str(ef_list[-1])] if ef_list else []  # the last ef measured
        probes = [subprocess.run([sys.executable, __file__, "--probe", dsn or "local", "--queries", str(q),
                                  "--tmp", folder, *probe_ef], capture_output=True, text=True, check=True)
                  for _ in range(2)]
        serving = [json.loads(p.stdout.strip().splitlines()[-1]) for p in probes]
        return {"backend": kind, "chunks": size + 1000, "bulk_ingest_chunks_per_s": round(size / bulk_s),
                "bulk_ingest_s": round(bulk_s, 1), "incremental_1000_chunks_s": round(incr_s, 2),
                "recall_at_10_by_ef_search": recall_by_ef, "dense_p50_p99_ms_by_ef_search": dense_ms_by_ef,
                **reference, **sparse_vs_exact,
                "dense_filtered_p50": round(percentile(fms, 50), 2), "dense_filtered_p99": round(percentile(fms, 99), 2),
                "filtered_k_returned_min": min(flt), "serving": serving}
    finally:
        if server is not None:
            server.destroy()


def ndcg(folder: str, per_terms: list[int]) -> dict:
    """Sparse nDCG@10 on Cranfield and CISI: postgres BM25-in-SQL vs the local rank-bm25 reference; with
    ``per_terms``, postgres at each ``index.postgres.sparse_postings_per_term`` (impact-ordered truncation; the
    sets are small, so low values stand in for the ratio of 2000 postings to a large corpus)."""
    from ragbudget.eval.retrieval import load_beir
    from ragbudget.index.postgres.backend import PostgresBackend
    from ragbudget.index.sparse import SparseIndex
    emb = ClusteredEmbedder()
    server = start_server(os.path.join(folder, "pgndcg"))
    out = {}
    try:
        cfg = cfg_for(server.dsn(), folder)
        backend = PostgresBackend(cfg)
        for name in ("cranfield", "cisi"):
            beir = load_beir(EVAL / name)
            docs = []
            with open(beir.corpus_path, encoding="utf-8") as f:
                for line in f:
                    r = json.loads(line)
                    docs.append(Document(id=str(r["_id"]), text=f"{r.get('title', '')}\n{r['text']}".strip(),
                                         metadata={"source": f"/{name}/{r['_id']}"}))
            store = backend.open(name, emb, create=True)
            store.add_documents(docs, emb)
            chunks = [c for d in docs for c in store.chunker.chunk(d)]
            ref = SparseIndex(cfg.retrieval.bm25, [store.analyzer(c.text) for c in chunks])
            reference = {qid: dedupe([chunks[r].doc_id for r, _ in ref.search(text, 50)])
                         for qid, text in beir.queries.items()}
            row = {"queries": len(beir.queries), "chunks": len(chunks),
                   "ndcg10_rank_bm25": round(float(np.mean([ndcg_at_k(reference[q], beir.qrels[q], 10)
                                                            for q in beir.queries])), 4)}
            for pt in [None, *per_terms]:
                b = backend if pt is None else PostgresBackend(cfg_for(server.dsn(), folder, per_term=pt))
                st = store if pt is None else b.open(name, emb)
                scores, ms, agree = [], [], 0
                for qid, text in beir.queries.items():
                    t = time.perf_counter()
                    pg = dedupe([c.doc_id for c, _ in st.search_sparse(text, 50)])
                    ms.append((time.perf_counter() - t) * 1000)
                    scores.append(ndcg_at_k(pg, beir.qrels[qid], 10))
                    agree += pg[:10] == reference[qid][:10]
                key = "postgres" if pt is None else f"postgres_per_term_{pt}"
                row.update({f"ndcg10_{key}": round(float(np.mean(scores)), 4),
                            f"same_top10_{key}": round(agree / len(beir.queries), 3),
                            f"sparse_p50_ms_{key}": round(percentile(ms, 50), 2),
                            f"sparse_p99_ms_{key}": round(percentile(ms, 99), 2)})
                if pt is not None:
                    b.close()
            out[name] = row
        backend.close()
    finally:
        server.destroy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ndcg", action="store_true")
    ap.add_argument("--per-term", default="", help="with --ndcg: sparse_postings_per_term values to compare")
    ap.add_argument("--backend", choices=["postgres", "local"], default="postgres")
    ap.add_argument("--ef-search", default="", help="postgres: HNSW ef_search values to measure recall at")
    ap.add_argument("--build-memory-mb", type=int, default=1024,
                    help="postgres: index.postgres.build_memory_mb for the bulk HNSW build (1M chunks: 3072)")
    ap.add_argument("--hnsw-m", type=int, default=None, help="postgres: index.postgres.hnsw_m")
    ap.add_argument("--ef-construction", type=int, default=None, help="postgres: index.postgres.hnsw_ef_construction")
    ap.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tmp", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--probe-ef-search", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global BUILD_MEMORY_MB
    BUILD_MEMORY_MB = args.build_memory_mb
    if args.hnsw_m:
        HNSW["hnsw_m"] = args.hnsw_m
    if args.ef_construction:
        HNSW["hnsw_ef_construction"] = args.ef_construction
    if args.probe:
        print(json.dumps(serve_probe(None if args.probe == "local" else args.probe, args.tmp, args.queries,
                                     args.probe_ef_search)))
        return
    folder = tempfile.mkdtemp(prefix="sweep-", dir="/tmp")
    if args.ndcg:
        print(json.dumps(ndcg(folder, [int(v) for v in args.per_term.split(",") if v]), indent=1))
        return
    for size in (int(s) for s in args.sizes.split(",")):
        efs = [int(e) for e in args.ef_search.split(",") if e]
        print(json.dumps(sweep(size, args.queries, folder, args.backend, efs)), flush=True)


if __name__ == "__main__":
    main()
