"""The extractive backend on real SQuAD paragraphs: cited answers, streaming, honest no-answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbudget.config import PromptConfig
from ragbudget.llm import ExtractiveGenerator, Generator, make_prompt
from ragbudget.llm.extractive import NO_ANSWER, passages_from_prompt, question_from_prompt, terms
from ragbudget.stages.prompt import build_prompt
from ragbudget.kernels.tokens import Tokenizer
from ragbudget.types import Chunk, Scored

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval" / "squad2"


def _scored(texts: list[str]) -> list[Scored]:
    return [Scored(Chunk(id=f"c{i}", doc_id=f"d{i}", text=t), score=1.0 - 0.1 * i) for i, t in enumerate(texts)]


@pytest.fixture(scope="module")
def gen() -> ExtractiveGenerator:
    return ExtractiveGenerator()


@pytest.fixture(scope="module")
def squad_cases() -> list[tuple[dict, list[str]]]:
    if not SQUAD.is_dir():
        pytest.skip(f"SQuAD eval set not found at {SQUAD}")
    corpus = [json.loads(line) for line in (SQUAD / "corpus.jsonl").open()]
    questions = [json.loads(line) for line in (SQUAD / "questions.jsonl").open()][:40]
    cases = []
    for k, q in enumerate(questions):
        cands = [c for c in corpus if any(a.lower() in c["text"].lower() for a in q["answers"])]
        if not cands:
            continue
        qt = set(terms(q["text"]))
        gold = max(cands, key=lambda c: len(qt & set(terms(c["text"]))))
        i = corpus.index(gold)
        ctx = [corpus[(i + 7) % len(corpus)]["text"], corpus[(i + 13) % len(corpus)]["text"]]
        ctx.insert(k % 3, gold["text"])  # the gold paragraph is not always first
        cases.append((q, ctx))
    return cases


def test_is_a_generator(gen: ExtractiveGenerator) -> None:
    assert isinstance(gen, Generator) and gen.name == "extractive"


def test_answers_squad_from_context(gen: ExtractiveGenerator, squad_cases) -> None:
    hits = 0
    for q, ctx in squad_cases:
        g = gen.generate(make_prompt([("user", f"Question: {q['text']}")]), max_tokens=96, context=_scored(ctx))
        assert g.backend == "extractive" and g.usage.completion_tokens <= 96
        assert "[" in g.text  # cited
        hits += any(a.lower() in g.text.lower() for a in q["answers"])
    assert len(squad_cases) >= 30
    assert hits / len(squad_cases) >= 0.8, f"{hits}/{len(squad_cases)}"


def test_citations_point_at_the_passage(gen: ExtractiveGenerator) -> None:
    ctx = _scored(["Paris is the capital of France. It has many museums.",
                   "Berlin is the capital of Germany. Berlin has a famous wall."])
    g = gen.generate(make_prompt([("user", "Question: What is the capital of Germany?")]), max_tokens=60,
                     context=ctx)
    assert g.text.startswith("Berlin is the capital of Germany. [2]")
    assert "[1]" not in g.text


def test_context_parsed_from_prompt_text(gen: ExtractiveGenerator) -> None:
    text = ("Documents:\n[1] The Nile flows north into the Mediterranean Sea.\n"
            "[2] Mount Everest is the highest mountain above sea level.\n\nQuestion: Which is the highest mountain?")
    p = make_prompt([("system", "Answer from the documents."), ("user", text)])
    assert [x.number for x in passages_from_prompt(p.text)] == [1, 2]
    assert question_from_prompt(p) == "Which is the highest mountain?"
    g = gen.generate(p, max_tokens=50)
    assert "Everest" in g.text and "[2]" in g.text


def test_reads_the_prompt_assemblers_fence(gen: ExtractiveGenerator) -> None:
    ctx = [Scored(Chunk(id="a", doc_id="a", text="Rivers carry sediment downstream.",
                        metadata={"source": "geo.md", "title": "Rivers"}), score=0.9),
           Scored(Chunk(id="b", doc_id="b", text="Mount Everest is the highest mountain above sea level. It is in Nepal.",
                        metadata={"source": "peaks.md"}), score=0.8)]
    p = build_prompt(PromptConfig(), Tokenizer(), question="Which is the highest mountain?", context=ctx)
    passages = passages_from_prompt(p.text)
    assert [x.text for x in passages] == [c.chunk.text for c in ctx]
    assert question_from_prompt(p) == "Which is the highest mountain?"
    g = gen.generate(p, max_tokens=50)  # no explicit context: parsed from the fenced block
    assert g.text == "Mount Everest is the highest mountain above sea level. [2]"


def test_no_answer_is_said_plainly(gen: ExtractiveGenerator) -> None:
    g = gen.generate(make_prompt([("user", "Question: Who painted the Mona Lisa?")]), max_tokens=50,
                     context=_scored(["Rivers carry sediment downstream."]))
    assert g.text == NO_ANSWER


def test_streams_word_by_word_within_max_tokens(gen: ExtractiveGenerator) -> None:
    long = " ".join(f"Fact {i}: the reactor core temperature rises during load test number {i}." for i in range(30))
    s = gen.stream(make_prompt([("user", "Question: reactor core temperature load test?")]), max_tokens=12,
                   context=_scored([long]))
    events = list(s)
    g = s.generation
    assert len(events) > 3 and g.text == "".join(e.text for e in events)
    assert g.usage.completion_tokens <= 12 and g.finish_reason == "length"
    assert g.timings.ttft_ms is not None and len(g.timings.itl_ms) == len(events) - 1


async def test_astream(gen: ExtractiveGenerator) -> None:
    st = gen.astream(make_prompt([("user", "Question: capital of Germany?")]), max_tokens=40,
                     context=_scored(["Berlin is the capital of Germany."]))
    text = "".join([e.text async for e in st])
    assert text == "Berlin is the capital of Germany. [1]" == st.generation.text


def test_sentence_ends_before_a_lower_case_start_and_short_topic_sentence_brings_its_follower(
        gen: ExtractiveGenerator) -> None:
    ctx = _scored(["Excess requests are rejected with HTTP 429 and a Retry-After header. ragbudget measures "
                   "time to first token, cache hit rates and tokens per section for every request.",
                   "Unused budget can be lent. The default lending policy moves unused history budget to the "
                   "retrieved context. Ledgers record every section."])
    g = gen.generate(make_prompt([("user", "Question: How is unused budget lent?")]), max_tokens=60, context=ctx)
    assert g.text.startswith("Unused budget can be lent. The default lending policy moves unused history "
                             "budget to the retrieved context. [2]")
    assert "Ledgers" not in g.text  # the follower shares a question term; the one after it does not
    g = gen.generate(make_prompt([("user", "Question: What does ragbudget measure for a request?")]),
                     max_tokens=60, context=ctx)
    assert g.text.startswith("ragbudget measures time to first token")  # not glued to the 429 sentence
    assert "429" not in g.text


def test_best_sentence_over_max_tokens_is_cut_but_keeps_its_citation(gen: ExtractiveGenerator) -> None:
    long = "The wing " + " ".join(f"section {i} carries load" for i in range(40)) + "."
    g = gen.generate(make_prompt([("user", "Question: What does the wing carry?")]), max_tokens=30,
                     context=_scored([long]))
    assert g.text.endswith("… [1]") and g.usage.completion_tokens <= 30 and g.finish_reason == "length"
