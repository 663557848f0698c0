"""A real quantized instruct model in the loop: SmolLM2-135M-Instruct (Q4_1) through llama.cpp.

The install builds llama.cpp for the CPU it runs on (never AMX); these tests run a realistic RAG prompt on the
quantized model, check every usage count against the engine's own state (EOS endings, length endings,
multi-byte text), the engine options of a tier, cancellation, prefix reuse, and the whole pipeline with a
llamacpp tier (ledger, refit on a small window). Question counts are bounded: the model decodes ~50 tokens/s
on two cores.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

import pytest

from ragbudget import RAG
from ragbudget.config import Config, TierConfig
from ragbudget.errors import BackendUnavailableError, ConfigError
from ragbudget.llm import LlamaCppGenerator, make_generator, make_prompt
from ragbudget.llm.llamacpp_guard import check_cpu_support, system_info, uses_amx
from ragbudget.types import FinalEvent, TokenEvent

pytestmark = pytest.mark.slow  # real engines or servers: `-m "not slow"` skips them in a quick loop

llama_cpp = pytest.importorskip("llama_cpp")

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval" / "squad2"
SYSTEM = ("You are a careful assistant. Answer the question using only the documents provided in the "
          "context. If the documents do not contain the answer, say so.")


@pytest.fixture(scope="module")
def smol(smollm2_gguf: Path) -> LlamaCppGenerator:
    g = LlamaCppGenerator(str(smollm2_gguf), n_ctx=2048, n_threads=1)
    g.load()
    return g


def _squad_records(n: int) -> list[dict]:
    with (SQUAD / "corpus.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def _rag_prompt(question: str, paragraphs: list[str]):
    docs = "\n\n".join(f"[{i + 1}] {p}" for i, p in enumerate(paragraphs))
    return make_prompt([("system", SYSTEM), ("user", f"Documents:\n{docs}\n\nQuestion: {question}")],
                       static_prefix=SYSTEM)


def _evaluated(g: LlamaCppGenerator) -> int:
    """Tokens llama.cpp holds in its context now (the engine's own state, not ours)."""
    return len(g.load()._input_ids)


def test_install_builds_llama_cpp_without_native_only_kernels() -> None:
    info = system_info()
    assert "CPU" in info and not uses_amx(info), info


def test_quantized_model_answers_a_realistic_rag_prompt(smol: LlamaCppGenerator) -> None:
    recs = _squad_records(4)
    p = _rag_prompt("What is the topic of the documents?", [r["text"] for r in recs])
    n_prompt = smol.count_prompt(p)
    assert n_prompt is not None and n_prompt > 400  # long enough to reach the quantized matmul kernels
    g = smol.generate(p, max_tokens=24)
    assert g.text.strip() and "\ufffd" not in g.text
    assert g.usage.prompt_tokens == n_prompt and not g.usage_estimated
    assert 1 <= g.usage.completion_tokens <= 24


def test_usage_is_the_engines_count_on_eos_and_length_endings(smol: LlamaCppGenerator) -> None:
    p = make_prompt([("user", "Reply with the single word: yes")])
    g = smol.generate(p, max_tokens=64)
    assert g.finish_reason == "stop" and g.usage.completion_tokens < 64
    # EOS ends it: every answer token was evaluated, the EOS token is not part of the answer
    assert _evaluated(smol) == g.usage.prompt_tokens + g.usage.completion_tokens
    long = smol.generate(make_prompt([("user", "Write a long story about a lighthouse keeper.")]), max_tokens=12)
    assert long.finish_reason == "length" and long.usage.completion_tokens == 12
    # the last sampled token of a length ending is never evaluated
    assert _evaluated(smol) == long.usage.prompt_tokens + 11
    assert long.usage.prompt_tokens == smol.count_prompt(make_prompt([("user", "Write a long story about a "
                                                                                "lighthouse keeper.")]))


def test_multibyte_text_counts_tokens_not_pieces(smol: LlamaCppGenerator) -> None:
    p = make_prompt([("user", "Copy this exactly: 日本語のテキスト 🚀🚀 ✓ café")])
    s = smol.stream(p, max_tokens=40)
    events = list(s)
    g = s.generation
    assert g is not None and "\ufffd" not in g.text
    assert g.text == "".join(e.text for e in events)
    if g.finish_reason == "stop":
        assert _evaluated(smol) == g.usage.prompt_tokens + g.usage.completion_tokens
    # CJK and emoji take several byte-level tokens per character: pieces are whole characters, fewer than tokens
    assert len(events) <= g.usage.completion_tokens
    assert any(ord(ch) > 0x2E80 for ch in g.text) or g.usage.completion_tokens >= len(events)


def test_stop_strings_end_the_answer_and_never_leak(smol: LlamaCppGenerator) -> None:
    p = make_prompt([("user", "Count from 1 to 20, separated by commas.")])
    g = smol.generate(p, max_tokens=80, stop=["7"])
    assert "7" not in g.text and g.finish_reason == "stop"
    assert g.text.strip().startswith("1")


def test_cancel_mid_stream_keeps_partial_and_frees_the_engine(smol: LlamaCppGenerator) -> None:
    s = smol.stream(make_prompt([("user", "Write a long story about a lighthouse keeper.")]), max_tokens=200)
    got = [next(s) for _ in range(3)]
    s.close()
    assert s.generation is not None and s.generation.partial and s.generation.text == "".join(e.text for e in got)
    done = threading.Event()

    def again() -> None:  # the lock is free: another request runs at once
        smol.generate(make_prompt([("user", "Say hi")]), max_tokens=4)
        done.set()

    t = threading.Thread(target=again)
    t.start()
    t.join(timeout=30)
    assert done.is_set()


def test_close_stops_a_generation_in_flight_before_freeing_the_model(smollm2_gguf: Path) -> None:
    """A process that gave up on an answer (a tier timeout) and shuts down: close() aborts the decode in flight
    (llama.cpp's abort callback), waits for it, then frees the model, so no thread decodes with a freed model
    (the segfault at exit). The interrupted request gets a clear error; a later one loads the model again."""
    from ragbudget.errors import GenerationError
    g = LlamaCppGenerator(str(smollm2_gguf), n_ctx=2048, n_threads=1)
    g.load()
    paragraphs = [r["text"] for r in _squad_records(8)]
    outcome: list[BaseException | str] = []

    def ask() -> None:
        try:
            outcome.append(g.generate(_rag_prompt("Summarise every document in detail.", paragraphs),
                                      max_tokens=400).text)
        except BaseException as err:  # noqa: BLE001 - the test reads it
            outcome.append(err)

    t = threading.Thread(target=ask)
    t.start()
    while not g._lock.locked() and t.is_alive():
        t.join(timeout=0.01)
    g.close(timeout_s=60)
    t.join(timeout=60)
    assert not t.is_alive() and g._llm is None
    assert len(outcome) == 1 and isinstance(outcome[0], GenerationError) and "closed" in str(outcome[0])
    assert g.generate(make_prompt([("user", "Say hi")]), max_tokens=4).usage.completion_tokens > 0
    g.close()


def test_shared_static_prefix_is_served_from_the_kv_cache(smol: LlamaCppGenerator) -> None:
    recs = _squad_records(3)
    smol.reset()
    first = smol.generate(_rag_prompt("Who is mentioned first?", [recs[0]["text"]]), max_tokens=4)
    second = smol.generate(_rag_prompt("What year is given?", [recs[1]["text"]]), max_tokens=4)
    assert first.usage.cached_tokens == 0
    n_system = smol.count_prompt(make_prompt([("system", SYSTEM)]))
    assert n_system is not None and second.usage.cached_tokens >= n_system - 2
    assert second.usage.cached_tokens < second.usage.prompt_tokens


def test_tier_engine_options_are_validated_and_reach_llama_cpp(smollm2_gguf: Path) -> None:
    with pytest.raises(ValueError, match="n_bacth"):
        TierConfig(name="t", backend="llamacpp", model=str(smollm2_gguf), llamacpp={"n_bacth": 64})
    with pytest.raises(ValueError, match="flash_attn"):
        TierConfig(name="t", backend="llamacpp", model=str(smollm2_gguf), llamacpp={"type_v": "q8_0"})
    with pytest.raises(ValueError, match="n_ubatch"):
        TierConfig(name="t", backend="llamacpp", model=str(smollm2_gguf), llamacpp={"n_batch": 64, "n_ubatch": 128})
    with pytest.raises(ConfigError, match="llamacpp"):
        Config().with_overrides({"llm.tiers": [{"name": "t", "backend": "llamacpp", "model": str(smollm2_gguf),
                                                "llamacpp": {"type_k": "q3"}}]})
    tier = TierConfig(name="t", backend="llamacpp", model=str(smollm2_gguf), context_window=1024, n_ctx=1024,
                      llamacpp={"n_batch": 256, "n_ubatch": 128, "seed": 7, "flash_attn": True, "type_k": "q8_0",
                                "type_v": "q8_0", "use_mmap": False})
    g = make_generator(tier)
    assert isinstance(g, LlamaCppGenerator) and g.seed == 7
    llm = g.load()
    assert llm.n_batch == 256 and llm.context_params.n_ubatch == 128
    assert llm.context_params.type_k == 8 and llm.context_params.type_v == 8
    assert llm.model_params.load_mode == llama_cpp.LLAMA_LOAD_MODE_NONE  # use_mmap: false
    out = g.generate(make_prompt([("user", "Say hi")]), max_tokens=6)
    assert out.text.strip() and out.usage.completion_tokens <= 6


def test_amx_build_is_probed_and_a_sigill_is_a_clear_error(smollm2_gguf: Path) -> None:
    amx = "CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 1 |"
    assert uses_amx(amx) and not uses_amx("CPU : SSE3 = 1 | AVX2 = 1 |")
    # the real probe: the model runs a 400-token prompt in a child process, which this build survives
    check_cpu_support(smollm2_gguf, info=amx)
    # a child killed by SIGILL (what an AMX kernel does in a VM that traps it) refuses the load
    dies = [sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(signal.SIGILL)})"]
    with pytest.raises(BackendUnavailableError, match="SIGILL") as err:
        check_cpu_support(smollm2_gguf, info=amx, command=dies)
    assert "GGML_NATIVE=OFF" in str(err.value) or "llama_cmake_args" in str(err.value)


# ------------------------------------------------------------------ the whole pipeline on the real model
@pytest.fixture(scope="module")
def smol_rag(tmp_path_factory: pytest.TempPathFactory, smollm2_gguf: Path, embedder):
    tmp = tmp_path_factory.mktemp("smol-rag")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in _squad_records(40)), encoding="utf-8")
    tier = {"name": "smollm2", "backend": "llamacpp", "model": str(smollm2_gguf), "context_window": 4096,
            "n_ctx": 4096, "n_threads": 1, "max_output_tokens": 48, "timeout_s": 120, "first_token_timeout_s": 60}
    cfg = Config().with_overrides({"index.dir": str(tmp / "idx"), "cache.path": str(tmp / "cache.sqlite"),
                                   "llm.tiers": [tier]})
    rag = RAG(cfg, index="squad", embedder=embedder)
    rag.ingest(corpus)
    yield rag
    rag.close()


def test_pipeline_streams_a_real_answer_with_an_honest_ledger(smol_rag: RAG) -> None:
    q = json.loads((SQUAD / "questions.jsonl").read_text(encoding="utf-8").splitlines()[0])
    events = list(smol_rag.stream(q["text"]))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    final = [e for e in events if isinstance(e, FinalEvent)]
    assert tokens and len(final) == 1
    ans = final[0].answer
    assert ans.answer == "".join(t.text for t in tokens) and ans.answer.strip()
    assert ans.ledger.route["backend"] == "llamacpp" and not ans.ledger.route.get("usage_estimated")
    p = ans.ledger.prompt
    # the engine's own count of the prompt equals what the router counted before sending it
    assert p["engine_prompt_tokens"] == p["engine_tokens_counted"] == ans.usage.prompt_tokens
    assert ans.ledger.sections["output"].used == ans.usage.completion_tokens <= 48
    assert ans.timings.ttft_ms is not None and ans.timings.ttft_ms <= ans.timings.total_ms
    # a second question reuses the static prefix (system prompt) from llama.cpp's KV cache
    second = smol_rag.query("Who was the first person named in the documents?")
    assert second.ledger.prompt["engine_cached_tokens"] > 0


def test_pipeline_stream_left_early_frees_the_engine(smol_rag: RAG) -> None:
    stream = smol_rag.stream("Write everything the documents say about the Normans.", max_tokens=48)
    seen = 0
    for ev in stream:
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 2:
                break
    stream.close()  # the caller went away: generation stops between tokens, the engine lock is released
    done = threading.Event()

    def ask() -> None:
        smol_rag.query("In what country is Normandy located?", max_tokens=8)
        done.set()

    t = threading.Thread(target=ask)
    t.start()
    t.join(timeout=60)
    assert seen == 2 and done.is_set()


def test_quickstart_answers_with_the_real_model(tmp_path: Path, capsys) -> None:
    from ragbudget.cli import main as cli_main

    assert cli_main(["quickstart", "--index-dir", str(tmp_path / "idx")]) == 0  # auto: SmolLM2 is installed
    out = capsys.readouterr().out
    assert "SmolLM2-135M-Instruct on llama.cpp" in out and out.count("A:") >= 3
    assert "route smollm2" in out or "cache " in out


def test_pipeline_refits_the_context_to_a_small_window(smollm2_gguf: Path, tmp_path: Path, embedder) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in _squad_records(20)), encoding="utf-8")
    tier = {"name": "small", "backend": "llamacpp", "model": str(smollm2_gguf), "context_window": 384,
            "n_ctx": 384, "n_threads": 1, "max_output_tokens": 16}
    cfg = Config().with_overrides({"index.dir": str(tmp_path / "idx"), "cache.response": False,
                                   "cache.retrieval": False, "cache.semantic.enabled": False, "llm.tiers": [tier],
                                   "budget.retrieved.cap": 2000, "budget.context_window": 8192,
                                   "trim.adaptive": False})  # fill the budget: over the tier's window
    with RAG(cfg, index="squad", embedder=embedder) as rag:
        rag.ingest(corpus)
        q = json.loads((SQUAD / "questions.jsonl").read_text(encoding="utf-8").splitlines()[1])["text"]
        ans = rag.query(q, max_tokens=16)
    assert ans.ledger.route["refitted"] and ans.answer.strip()
    assert ans.usage.prompt_tokens + 16 <= 384


def test_embedding_threads_hold_after_an_ingest(tmp_path: Path) -> None:
    import torch

    cfg = Config().with_overrides({"index.dir": str(tmp_path / "idx"), "embedding.threads": 1,
                                   "embedding.cache": False})
    with RAG(cfg, index="t") as rag:
        rag.warm_up()
        assert torch.get_num_threads() == 1
        rag.ingest(SQUAD / "corpus.jsonl")
        assert torch.get_num_threads() == 1


def test_readme_llamacpp_tier_example_loads_and_answers(smollm2_gguf: Path, tmp_path):
    """Issue 29: the README's SmolLM2 tier, with the path `require_smollm2()` prints, loads and answers."""
    import re

    from ragbudget.config import load_config
    from ragbudget.llm.models import require_smollm2

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "SMOLLM2_GGUF" in b)
    assert require_smollm2() == smollm2_gguf
    path = tmp_path / "local.yaml"
    path.write_text(block.replace("SMOLLM2_GGUF", str(require_smollm2())) + f"index:\n  dir: {tmp_path}\n",
                    encoding="utf-8")
    cfg = load_config(path, environ={})
    (tier,) = cfg.llm.tiers
    assert tier.backend == "llamacpp" and Path(tier.model) == smollm2_gguf
    gen = make_generator(tier)
    gen.load()
    out = gen.generate(make_prompt([("system", "Answer briefly."), ("user", "Say hello.")]), max_tokens=8)
    assert out.usage.completion_tokens > 0 and out.backend == "llamacpp"
