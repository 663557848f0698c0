"""A conversation about a document moves forward through it: CANARD follow-ups through the real pipeline
(real index, MiniLM, extractive answers) with their dialog history."""

from __future__ import annotations

import json

from ragbudget import RAG
from ragbudget.config import Config
from ragbudget.eval.answers import contains_answer
from ragbudget.eval.followups import followup_set
from ragbudget.eval.history_eval import load_canard


def test_follow_ups_get_the_sentence_after_the_last_answer_in_fewer_tokens(shared_data, tmp_path, embedder):
    corpus, questions = followup_set(load_canard(shared_data / "canard", limit=250))
    (tmp_path / "docs").mkdir()
    with (tmp_path / "docs" / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for rec in corpus:
            f.write(json.dumps(rec) + "\n")
    picked = questions[::max(1, len(questions) // 20)][:20]
    results = {}
    # dialog flow alone (followup_parent_share 0), then the defaults (flow and the follow-up's parent chunk)
    for name, flow, parent in (("flow", 1.0, 0.0), ("off", 0.0, 0.0), ("default", 1.0, None)):
        over = {"index.dir": str(tmp_path / "ix"), "cache.path": str(tmp_path / f"{name}.sqlite"),
                "cache.response": False, "trim.dialog_flow": flow}
        cfg = Config().with_overrides(over if parent is None else {**over, "trim.followup_parent_share": parent})
        with RAG(cfg, index="canard", embedder=embedder) as rag:
            if name == "flow":
                rag.ingest(tmp_path / "docs")
            hits, tokens, notes = 0, 0, 0
            for q in picked:
                a = rag.query(q["raw"], history=q["history"])
                ctx = " ".join(s.chunk.text for s in a.context or [])
                hits += contains_answer(ctx, q["answers"])
                tokens += a.ledger.sections["retrieved"].used
                notes += any("dialog flow" in n for n in a.ledger.sections["retrieved"].notes)
            results[name] = (hits, tokens, notes)
    (flow_hits, flow_tokens, flow_notes), (off_hits, off_tokens, off_notes) = results["flow"], results["off"]
    assert off_notes == 0 and flow_notes >= len(picked) // 3
    assert flow_hits > off_hits  # the next answer reaches the context more often
    assert flow_tokens <= off_tokens  # and no more is sent for it
    # the defaults add the best sentence's chunk for a follow-up: the answer is in context more often still
    default_hits, default_tokens, _ = results["default"]
    assert default_hits >= flow_hits and default_tokens > flow_tokens
