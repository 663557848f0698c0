"""Cold ingest through the registry (what `ragbudget ingest` runs), before/after in one run (issue 17).

    git worktree add /tmp/before 66d4659
    .venv/bin/python benchmarks/cold_ingest.py /tmp/before . DATA.jsonl [DATA.jsonl ...]

Each (data, code) pair runs in a fresh process with an empty index folder and embedding cache."""
import json, subprocess, sys
before, after, *datas = sys.argv[1:]
CODE = r'''
import sys, time, tempfile, json
sys.path.insert(0, sys.argv[1])
from ragbudget.config import Config
from ragbudget.index.hybrid import default_embedder
try:
    from ragbudget.index_registry import IndexRegistry
except ImportError:  # code from before the issue-14 renames
    from ragbudget.indexes import IndexRegistry
d = tempfile.mkdtemp()
cfg = Config().with_overrides({"index.dir": d, **json.loads(sys.argv[3])})
emb = default_embedder(cfg); emb.warm_up()
reg = IndexRegistry(cfg, emb)
t = time.perf_counter()
rep = reg.ingest(sys.argv[2], "x")
dt = time.perf_counter() - t
print(json.dumps({"chunks": rep.chunks_added, "s": dt}))
'''
for data in datas:
    for label, repo, over in (("before", before, {}), ("after", after, {}),
                              ("after-1thread", after, {"embedding.ingest_threads": 1})):
        out = subprocess.run([sys.executable, "-c", CODE, repo, data, json.dumps(over)], capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"err": out.stderr[-800:]}
        if "s" in r:
            r["chunks_per_s"] = round(r["chunks"] / r["s"], 2)
        print(data, label, r, flush=True)
