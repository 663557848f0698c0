"""Issue 28: the learned near-miss verifier on the real semantic cache (real MiniLM, shipped model)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from ragbudget.cache import MemoryBackend, ResponseScope, SemanticResponseCache, verifier
from ragbudget.config import SemanticCacheConfig
from ragbudget.errors import ConfigError
from ragbudget.eval.cache_eval import evaluate_pairs, load_pairs, select, wilson

DATA = Path(__file__).parent / "data"
SCOPE = ResponseScope(tenant="t", index_version="v", prompt_version="p", model_tier="small", max_tokens=64)
PKG = Path(verifier.__file__).parent


def _imports(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {(n.module or "") + ":" + ",".join(a.name for a in n.names) for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom)}


def test_word_lists_live_in_a_leaf_and_imports_go_one_way():
    assert not any(i.startswith("guards") or i == ":guards" or ",guards" in i for i in _imports(PKG / "contrast.py"))
    assert all(i.startswith("__future__") for i in _imports(PKG / "wordlists.py"))
    assert any(i.startswith("contrast") or "contrast" in i.split(":")[1] for i in _imports(PKG / "guards.py"))


def test_wilson_interval():
    assert wilson(0, 100) == (0.0, 0.037)
    lo, hi = wilson(60, 100)
    assert lo < 0.6 < hi and hi - lo < 0.2
    assert wilson(0, 0) == (0.0, 1.0)


def test_learned_verifier_serves_more_held_out_duplicates_without_wrong_answers(embedder):
    pairs = select(load_pairs(DATA / "question_pairs.tsv"), "heldout")
    (lexical,) = evaluate_pairs(pairs, embedder, SemanticCacheConfig(verifier="lexical"))
    (learned,) = evaluate_pairs(pairs, embedder, SemanticCacheConfig())  # the defaults: learned, 0.76
    assert learned["verifier"] == "learned" and lexical["verifier"] == "lexical"
    assert learned["hit_rate"] >= lexical["hit_rate"] + 0.15
    assert learned["hit_rate"] >= 0.55  # 0.60 measured (BENCHMARKS.md, issue 28): a regression check
    assert learned["false_hit_rate"] <= 0.02
    assert learned["served_by"].get("1:learned", 0) > 0 and "1:learned" not in lexical["served_by"]
    lo, hi = learned["hit_rate_ci"]
    assert lo <= learned["hit_rate"] <= hi


def test_contrasts_stay_refused(embedder):
    pairs = [p for p in load_pairs(DATA / "near_miss_pairs.tsv") if p.split in ("heldout", "fresh")]
    (r,) = evaluate_pairs(pairs, embedder, SemanticCacheConfig())
    assert r["false_hit_rate"] <= 0.02 and r["hit_rate"] >= 0.9
    assert sum(v for k, v in r["refused_by"].items() if k.startswith("0:")) > 0


def _cache(embedder, **cfg) -> SemanticResponseCache:
    return SemanticResponseCache(MemoryBackend(), embedder, SemanticCacheConfig(**{"verifier": "learned", **cfg}))


def test_decisions_say_why_and_reach_the_ledger(embedder):
    cache = _cache(embedder)
    stored, asked = "How do I get rid of acne?", "How can I clear up my acne?"
    cache.store(SCOPE, stored, {"answer": "A", "ledger": {"flags": ["old"]}})
    hit, decisions = cache.lookup_explained(SCOPE, asked)
    assert hit is not None and decisions[-1].accepted and decisions[-1].reason == "learned"
    assert decisions[-1].objection in ("substitution", "contrast", "content")
    assert decisions[-1].score is not None and decisions[-1].score >= decisions[-1].bar
    assert hit.record["ledger"]["flags"][0] == "old" and hit.record["ledger"]["flags"][1].startswith("semantic_hit: served (learned")
    assert hit.decision == decisions[-1].describe()
    # with the learned verifier off the same near miss is refused, and says so
    hit, decisions = _cache(embedder, verifier="lexical").lookup_explained(SCOPE, asked)
    assert hit is None  # nothing stored in this fresh cache
    lexical = _cache(embedder, verifier="lexical")
    lexical.store(SCOPE, stored, {"answer": "A"})
    hit, decisions = lexical.lookup_explained(SCOPE, asked)
    assert hit is None and decisions and not decisions[0].accepted
    # ... as a grey-zone near miss the answer stage may still serve on evidence (scored by the same model)
    assert decisions[0].grey and decisions[0].score is not None and decisions[0].score >= decisions[0].bar
    off = _cache(embedder, verifier="lexical", evidence=False)
    off.store(SCOPE, stored, {"answer": "A"})
    hit, decisions = off.lookup_explained(SCOPE, asked)
    assert hit is None and not decisions[0].grey and decisions[0].score is None


def test_a_one_sided_modifier_between_questions_needs_the_higher_contrast_bar(embedder):
    """"long-term side effects" is another question than "side effects", though the model scores the pair
    over the question bar: a one-sided contrast word (polar, degree, class) gets the model's third bar, chosen
    so that no tune pair of that kind is served out of fold. A reworded verb keeps the question bar."""
    model = verifier.load()
    assert model.threshold < model.threshold_contrast < 1  # type: ignore[operator]
    cache = _cache(embedder)
    cache.store(SCOPE, "What are the side effects of aspirin?", {"answer": "A"})
    hit, decisions = cache.lookup_explained(SCOPE, "What are the long-term side effects of aspirin?")
    d = decisions[0]
    assert hit is None and d.objection == "contrast" and d.reason == "learned" and not d.hard
    assert d.bar == model.threshold_contrast and model.threshold <= d.score < d.bar  # type: ignore[operator]
    cache.store(SCOPE, "How do I get rid of acne?", {"answer": "B"})
    hit, decisions = cache.lookup_explained(SCOPE, "How can I clear up my acne?")
    assert hit is not None and decisions[-1].bar == model.threshold


def test_a_name_written_out_is_the_same_question_within_a_conversation(embedder):
    """CANARD's rewrites: "Where did Skelton perform?" / "Where did Red Skelton perform?" differ only by the
    name written out. In one conversation's scope (the history fixes who is meant) it is served ("name"); in
    an open scope it is a grey near miss that only evidence agreement may serve; another question about a
    longer name ("When" / "Where was John Smith born?") stays a hard entity refusal."""
    from dataclasses import replace
    from ragbudget.cache import guards
    stored, asked = "Where did Skelton perform?", "Where did Red Skelton perform?"
    assert guards.explain(stored, asked).reason == "name" and not guards.explain(stored, asked).hard
    assert guards.explain("When was Smith born?", "Where was John Smith born?").reason == "entities"
    assert guards.explain("Did Apple sue Samsung?", "Did Apple sue Samsung Electronics?").reason == "name"
    assert guards.explain("Did Apple sue Samsung?", "Did Apple sue Google?").hard
    talk = replace(SCOPE, conversation="c1")
    cache = _cache(embedder)
    for scope in (talk, SCOPE):
        cache.store(scope, stored, {"answer": "In vaudeville."})
    hit, decisions = cache.lookup_explained(talk, asked)
    assert hit is not None and decisions[-1].reason == "name" and decisions[-1].accepted
    hit, decisions = cache.lookup_explained(SCOPE, asked)
    assert hit is None and decisions[0].reason == "name" and decisions[0].grey and not decisions[0].hard


def test_hard_refusals_are_never_scored(embedder):
    cache = _cache(embedder, verifier_min_score=0.0)  # even a bar of 0 does not serve a contrast
    for stored, asked in (("How do I enable two-factor authentication?", "How do I disable two-factor authentication?"),
                          ("Did Google acquire YouTube?", "Did YouTube acquire Google?"),
                          ("Can I bring 2 bags on the flight?", "Can I bring 3 bags on the flight?")):
        cache.store(SCOPE, stored, {"answer": "A"})
        hit, decisions = cache.lookup_explained(SCOPE, asked)
        assert hit is None and decisions and decisions[0].hard and decisions[0].score is None
    assert cache.stats.snapshot()["reasons"]["refused_contrast"] >= 1


def test_negative_feedback_raises_that_entrys_bar(embedder):
    cache = _cache(embedder, feedback_step=0.5)
    stored, asked = "How do I get rid of acne?", "How can I clear up my acne?"
    cache.store(SCOPE, stored, {"answer": "A"})
    cache.store(SCOPE, "How do I reset my password?", {"answer": "B"})
    hit = cache.lookup(SCOPE, asked)
    assert hit is not None
    cache.feedback(hit, correct=False)
    hit2, decisions = cache.lookup_explained(SCOPE, asked)
    assert hit2 is None and decisions[0].reason == "feedback" and decisions[0].bar > hit_bar(hit)
    # lexical hits on other entries are untouched; a right answer lowers the bar again
    assert cache.lookup(SCOPE, "How can I reset my password?") is not None
    cache.feedback(hit, correct=True)
    cache.feedback(hit, correct=True)
    cache.feedback(hit, correct=True)
    cache.feedback(hit, correct=True)
    assert cache.lookup(SCOPE, asked) is not None
    with pytest.raises(ValueError, match="semantic"):
        cache.feedback(type(hit)(record={}, layer="exact", key="k"), correct=False)


def test_negative_feedback_also_holds_a_hit_the_guards_passed_outright(embedder):
    """A lexical acceptance (no objection to score) found wrong needs a closer question next time: the
    entry's cosine threshold rises by the step, and a right answer brings it back."""
    cache = _cache(embedder, feedback_step=0.5)
    cache.store(SCOPE, "How do I reset my password?", {"answer": "B"})
    hit, decisions = cache.lookup_explained(SCOPE, "How can I reset my password?")
    assert hit is not None and decisions[-1].reason == "lexical"
    cache.feedback(hit, correct=False)
    again, decisions = cache.lookup_explained(SCOPE, "How can I reset my password?")
    assert again is None and decisions[0].reason == "feedback" and decisions[0].objection == "lexical"
    for _ in range(4):
        cache.feedback(hit, correct=True)
    assert cache.lookup(SCOPE, "How can I reset my password?") is not None


def test_answer_agreement():
    from ragbudget.stages.answer_cache import answer_agreement
    short = "The school color is crimson. [1]"
    assert answer_agreement(short, short + " It was adopted by a vote in 1875. [1]") == 1.0  # fuller, same
    assert answer_agreement("Crimson is the school color [1].", "Harvard was founded in 1636 [1].") < 0.2
    assert answer_agreement("He has won 230 tournaments worldwide.", "He has won 2 tournaments worldwide.") == 0.0
    assert answer_agreement("", "") == 1.0 and answer_agreement("Yes.", "") == 0.0


def hit_bar(hit) -> float:
    return float(hit.decision.split(">= ")[1].split(")")[0])


def test_bad_model_file_is_a_clear_error(embedder, tmp_path: Path):
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps({"features": ["cosine"], "mean": [0], "scale": [1], "weights": [1], "bias": 0,
                               "threshold": 0.5}))
    with pytest.raises(ConfigError, match="features differ"):
        _cache(embedder, verifier_model=str(bad))
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        _cache(embedder, verifier_model=str(bad))
    shipped = json.loads(verifier.MODEL_PATH.read_text())
    assert shipped["features"] == list(verifier.FEATURES) and 0.5 <= shipped["threshold"] < 1


def test_store_evict_and_restore_keep_rows_consistent(embedder):
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(60, embedder.dim)).astype(np.float32)
    cache = SemanticResponseCache(MemoryBackend(), embedder, SemanticCacheConfig(verifier="learned", max_entries=30))
    for i in range(60):
        cache.store(SCOPE, f"question {i}", {"answer": str(i)}, embedding=vecs[i])
        if i % 7 == 0 and i >= 35:
            cache.store(SCOPE, "question 31", {"answer": "31"}, embedding=vecs[31])  # re-store: stays newest
    assert len(cache) == 30
    for i in [31, *range(31, 60)]:
        (top, *_) = cache.candidates(SCOPE, f"question {i}", vecs[i])
        assert top[1] == f"question {i}" and top[0] == pytest.approx(1.0, abs=1e-5)
    assert all(not c or c[0][1] != "question 5" or c[0][0] < 0.99 for c in [cache.candidates(SCOPE, "q", vecs[5])])


def test_shipped_model_has_a_higher_bar_for_sentences_than_for_questions(embedder):
    model = verifier.load()
    assert 0.5 <= model.threshold <= model.threshold_statements < 1
    assert verifier.is_question("how do I reset my password") and verifier.is_question("Can I pay by card?")
    assert not verifier.is_question("The company reported a loss.")
    info = json.loads(verifier.MODEL_PATH.read_text())["info"]
    assert info["folds"] >= 2 and "out_of_fold_at_bars" in info  # bars chosen on validation, not on the fit
    # an older model file (one bar) still loads: the bar then holds for both kinds of text
    d = model.to_dict()
    d.pop("threshold_statements")
    d.pop("threshold_contrast")
    old = verifier.LearnedVerifier.from_dict(d)
    assert old.threshold_statements == old.threshold == model.threshold and old.threshold_contrast is None
