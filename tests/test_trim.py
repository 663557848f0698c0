"""Query-aware sentence selection under a budget."""

import pytest

from ragbudget.config import TrimConfig
from ragbudget.retrieval.rerank import BiEncoderReranker
from ragbudget.kernels.tokens import Tokenizer
from ragbudget.budget.trim import order_context, trim_chunks
from ragbudget.kernels.sentences import split_sentences
from ragbudget.types import Chunk, Scored

TOK = Tokenizer()
PARIS = ("Paris is the capital of France. The city has about two million residents. "
         "The Louvre is the most visited museum in the world. Paris hosted the Olympic Games in 1900 and 1924.")
RIVER = ("The Seine flows through Paris. It is 777 kilometres long. "
         "Many bridges cross the river in the city centre, including the Pont Neuf.")
BANANA = "Bananas are berries. They grow in tropical climates. Bananas are rich in potassium."


def items():
    return [Scored(Chunk(id=f"c{i}", doc_id=f"d{i}", text=t, metadata={"source": f"s{i}.md"}), score=s)
            for i, (t, s) in enumerate([(PARIS, 0.9), (RIVER, 0.7), (BANANA, 0.2)])]


@pytest.fixture(scope="module")
def scorer(embedder):
    return BiEncoderReranker(embedder)


def test_split_sentences_merges_fragments():
    s = split_sentences("Dr. Smith arrived. He left quickly after that. Ok.")
    assert all(len(x.split()) >= 3 for x in s)
    assert " ".join(s).replace(" ", "") == "Dr. Smith arrived. He left quickly after that. Ok.".replace(" ", "")


def test_budget_respected_and_best_sentence_kept(scorer):
    r = trim_chunks("How long is the Seine?", items(), 40, TOK, scorer, TrimConfig())
    text = " ".join(s.chunk.text for s in r.kept)
    assert "777 kilometres" in text
    assert sum(TOK.count(s.chunk.text) for s in r.kept) <= 40
    assert r.used <= 40
    # whole sentences only, each kept piece keeps its chunk id / citation
    for s in r.kept:
        for part in s.chunk.text.split(" … "):
            orig = {"c0": PARIS, "c1": RIVER, "c2": BANANA}[s.chunk.id]
            assert part in orig
    assert any(c["chunk_id"] in ("c0", "c1") for c in r.compressed)
    assert any(d["reason"] in ("over budget", "below evidence floor") for d in r.dropped)


def test_sentences_go_before_whole_chunks(scorer):
    # enough for one sentence of each of the two relevant chunks, not for a whole chunk
    equal = [Scored(s.chunk, score=0.5) for s in items()[:2]]
    r = trim_chunks("Which museum is the most visited, and how long is the Seine?", equal, 45, TOK, scorer,
                    TrimConfig())
    assert {s.chunk.id for s in r.kept} == {"c0", "c1"}


def test_single_oversized_sentence_is_cut_only_then():
    long = "word " * 300 + "end."
    it = [Scored(Chunk(id="x", doc_id="x", text=long), score=1.0)]
    r = trim_chunks("word", it, 50, TOK, None, TrimConfig())
    assert r.kept and TOK.count(r.kept[0].chunk.text) <= 50
    assert r.compressed[0].get("note") == "sentence truncated"


def test_zero_budget_and_empty_input():
    assert trim_chunks("q", items(), 0, TOK, None, TrimConfig()).kept == []
    assert trim_chunks("q", [], 100, TOK, None, TrimConfig()).kept == []


def test_whole_chunk_mode_and_edges_order():
    r = trim_chunks("q", items(), 1000, TOK, None, TrimConfig(sentence_selection=False))
    assert [s.chunk.text for s in r.kept] == [PARIS, RIVER, BANANA]
    assert [x for x in order_context(list("abcde"), "edges")] == ["a", "c", "e", "d", "b"]


def test_budget_is_a_ceiling_not_a_target(scorer):
    """One sentence answers the question: a huge budget still sends about that sentence (and its
    neighbours), and the result says the evidence ran out; without adaptive stopping it fills up."""
    q = "How long is the Seine?"
    frugal = trim_chunks(q, items(), 4000, TOK, scorer, TrimConfig())
    full = trim_chunks(q, items(), 4000, TOK, scorer, TrimConfig(adaptive=False))
    assert "777 kilometres" in " ".join(s.chunk.text for s in frugal.kept)
    assert frugal.stop == "evidence" and "evidence ran out" in frugal.stop_note
    assert full.stop == "exhausted"
    assert frugal.used < full.used / 2
    assert "c2" not in {s.chunk.id for s in frugal.kept}
    assert any(d["chunk_id"] == "c2" and d["reason"] == "below evidence floor" for d in frugal.dropped)


def test_window_brings_the_neighbour_of_the_best_sentence(scorer):
    """'It is 777 kilometres long' needs 'The Seine flows through Paris' for its referent."""
    r = trim_chunks("How many kilometres long is it?", items()[1:2], 4000, TOK, scorer,
                    TrimConfig(sentence_window=1, window_floor=0.0, evidence_floor=1.0, parent_share=0))
    text = r.kept[0].chunk.text
    assert "777 kilometres" in text and "The Seine flows through Paris" in text
    alone = trim_chunks("How many kilometres long is it?", items()[1:2], 4000, TOK, scorer,
                        TrimConfig(sentence_window=0, evidence_floor=1.0, parent_share=0, anaphora=False))
    assert alone.kept[0].chunk.text.count(".") == 1


def test_a_sentence_opening_with_a_pronoun_brings_its_referent_without_a_window(scorer):
    """window 0, anaphora on (the default): 'It is 777 kilometres long' brings the sentence before it and
    nothing else; a sentence that names its subject comes alone."""
    cfg = TrimConfig(sentence_window=0, evidence_floor=1.0, parent_share=0)
    r = trim_chunks("How many kilometres long is it?", items()[1:2], 4000, TOK, scorer, cfg)
    assert r.kept[0].chunk.text == "The Seine flows through Paris. It is 777 kilometres long."
    named = trim_chunks("Which museum is the most visited in the world?", items()[:1], 4000, TOK, scorer, cfg)
    assert named.kept[0].chunk.text == "The Louvre is the most visited museum in the world."


def test_repeated_sentence_of_overlapping_chunks_is_sent_once(scorer):
    a = Scored(Chunk(id="a", doc_id="d", text=RIVER), score=0.9)
    b = Scored(Chunk(id="b", doc_id="d", text="It is 777 kilometres long. " + BANANA), score=0.8)
    r = trim_chunks("How long is the Seine?", [a, b], 4000, TOK, scorer, TrimConfig(adaptive=False))
    assert " ".join(s.chunk.text for s in r.kept).count("777 kilometres") == 1


def test_near_duplicate_sentences_are_sent_once(scorer):
    """The same fact worded twice (two documents quoting one source) goes into the prompt once."""
    one = "The Seine river is 777 kilometres long and flows through Paris."
    two = "Flowing through Paris, the Seine river is 777 kilometres long."
    a = Scored(Chunk(id="a", doc_id="d1", text=one + " " + BANANA), score=0.9)
    b = Scored(Chunk(id="b", doc_id="d2", text=two + " " + BANANA.replace("Bananas are berries.", "Plums are fruit.")),
               score=0.8)
    q = "How long is the Seine river?"
    r = trim_chunks(q, [a, b], 4000, TOK, scorer, TrimConfig(adaptive=False, sentence_window=0))
    text = " ".join(s.chunk.text for s in r.kept)
    assert (one in text) != (two in text)
    off = trim_chunks(q, [a, b], 4000, TOK, scorer,
                      TrimConfig(adaptive=False, sentence_window=0, duplicate_similarity=1.0))
    both = " ".join(s.chunk.text for s in off.kept)
    assert one in both and two in both


def test_parent_chunk_comes_whole_when_the_best_sentence_does_not_echo_the_question(scorer):
    """'Which bridges are famous?' finds one sentence holding half its terms: that sentence's chunk (the
    parent) goes in whole, and the result says so. A best sentence holding every question term, or a chunk
    over parent_share of the budget, gets sentences only."""
    cfg = TrimConfig(sentence_window=0, evidence_floor=1.0, parent_share=0.5)  # off by default (issue 27)
    weak = trim_chunks("Which bridges are famous?", items()[1:2], 400, TOK, scorer, cfg)
    assert weak.kept[0].chunk.text == RIVER and "whole chunk of the best sentence" in weak.stop_note
    strong = trim_chunks("Which bridges cross the river centre?", items()[1:2], 400, TOK, scorer, cfg)
    assert "777" not in strong.kept[0].chunk.text
    small = trim_chunks("Which bridges are famous?", items()[1:2], 40, TOK, scorer, cfg)
    assert "777" not in small.kept[0].chunk.text  # the chunk is over parent_share × 40 tokens


def test_a_follow_up_gets_the_parent_chunk_by_default(scorer):
    """A question that follows an answer ("Which bridges are famous?" after one about the Seine) shares few
    words with its own answer: with the defaults (parent_share 0, followup_parent_share 0.25) its best
    sentence's chunk goes in whole; the same question opening a conversation gets sentences only."""
    cfg = TrimConfig(sentence_window=0, evidence_floor=1.0, gap_window=0)
    assert cfg.parent_share == 0 and cfg.followup_parent_share == 0.25
    alone = trim_chunks("Which bridges are famous?", items()[1:2], 400, TOK, scorer, cfg)
    assert "777" not in alone.kept[0].chunk.text and "whole chunk" not in alone.stop_note
    follow = trim_chunks("Which bridges are famous?", items()[1:2], 400, TOK, scorer, cfg,
                         previous_answer="The Seine flows through Paris.")
    assert follow.kept[0].chunk.text == RIVER and "whole chunk of the best sentence" in follow.stop_note
    off = trim_chunks("Which bridges are famous?", items()[1:2], 400, TOK, scorer,
                      TrimConfig(sentence_window=0, evidence_floor=1.0, gap_window=0, followup_parent_share=0),
                      previous_answer="The Seine flows through Paris.")
    assert off.kept[0].chunk.text != RIVER and "whole chunk" not in off.stop_note  # dialog flow only


# ---------------------------------------------------------------- adaptive-k and the multi-hop bridge
KISS = ("Kiss and Tell (1945 film)", "Kiss and Tell is a 1945 American comedy film starring then 17-year-old "
        "Shirley Temple as Corliss Archer. In the film, two teenage girls cause their respective parents much "
        "concern when they start to become interested in boys. The parents' bickering about which girl is the "
        "worse influence causes more problems than it solves.")
TEMPLE = ("Shirley Temple", "Shirley Temple Black was an American actress, singer, dancer, businesswoman, and "
          "diplomat who was Hollywood's number one box-office draw as a child actress from 1935 to 1938. As an "
          "adult, she was named United States ambassador to Ghana and to Czechoslovakia and also served as Chief "
          "of Protocol of the United States.")
FILLER = [("Corliss Archer (radio)", "Meet Corliss Archer was a radio program that ran from 1943 to 1956. It was "
           "broadcast by CBS and later by NBC. Fewer than 24 episodes are known to exist."),
          ("Janet Waldo", "Janet Waldo was an American radio and voice actress. She voiced Judy Jetson. She played "
           "the title character in Meet Corliss Archer on radio.")]


def _docs(pairs, scores):
    return [Scored(Chunk(id=f"h{i}", doc_id=f"doc{i}", text=text, metadata={"title": title}), score=sc)
            for i, ((title, text), sc) in enumerate(zip(pairs, scores))]


def test_the_bridge_brings_the_document_the_first_hop_names(scorer):
    """Multi-hop: the film's sentence names Shirley Temple (the question does not); her document then sends
    its best sentences even though it scores low against the question, and the ledger note says why. A title
    the question itself names (Corliss Archer) is no bridge."""
    q = "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
    cands = _docs([KISS] + FILLER + [TEMPLE], [0.9, 0.6, 0.55, 0.3])
    cfg = TrimConfig(sentence_window=0, parent_share=0, evidence_floor=0.9, gap_window=0)
    without = trim_chunks(q, cands, 300, TOK, scorer, cfg.model_copy(update={"bridge": 0}))
    with_bridge = trim_chunks(q, cands, 300, TOK, scorer, cfg)
    assert "doc3" not in {s.chunk.doc_id for s in without.kept}  # too weak on its own
    assert "doc3" in {s.chunk.doc_id for s in with_bridge.kept}
    assert "Chief of Protocol" in " ".join(s.chunk.text for s in with_bridge.kept)  # its two best sentences
    assert "Shirley Temple" in with_bridge.stop_note and "bridge" in with_bridge.stop_note
    assert with_bridge.used <= 300


def test_the_score_gap_ends_the_evidence(scorer):
    """Adaptive-k: one sentence clearly answers, the rest trail far behind; the gap stop sends fewer tokens
    than the floor alone, keeps the answer, and says why it stopped."""
    q = "How long is the Seine?"
    cfg = TrimConfig(sentence_window=0, parent_share=0, evidence_floor=0.0, coverage_floor=0.0, bridge=0)
    no_gap = trim_chunks(q, items(), 400, TOK, scorer, cfg.model_copy(update={"gap_window": 0}))
    gap = trim_chunks(q, items(), 400, TOK, scorer, cfg)
    assert "777 kilometres" in " ".join(s.chunk.text for s in gap.kept)
    assert gap.used < no_gap.used
    assert gap.stop == "evidence" and "score gap" in gap.stop_note


def test_a_sentence_past_the_gap_must_bring_what_the_question_still_lacks(scorer):
    """The gap buffer is for the other half of a two-part question. With ``buffer_novelty`` a sentence past
    the score gap that holds no question term the context lacks ("Maxeda is owned by investors …" repeats
    the first hop) is skipped, and within ``buffer_reach`` the next one that does (where KKR is
    headquartered) is taken instead. Scores are set by hand so the gap falls after the first sentence."""
    from ragbudget.budget.trim import SentencePlan
    q = "Which firm owns Maxeda, and where is that firm headquartered?"
    docs = _docs([("Maxeda", "Since 2004 Maxeda is owned by Kohlberg Kravis Roberts. "
                   "Maxeda is owned by a group of investors since 2004."),
                  ("Kohlberg Kravis Roberts", "Kohlberg Kravis Roberts is headquartered in New York City. "
                   "It was founded in 1976 by three bankers.")], [0.9, 0.5])
    cfg = TrimConfig(sentence_window=0, parent_share=0, evidence_floor=0.0, coverage_floor=0.0, bridge=0,
                     anaphora=False, gap_window=5, gap_buffer=1, buffer_novelty=0.0)
    plan = SentencePlan.build(q, docs, TOK, scorer, cfg)
    assert [len(s) for s in plan.sentences] == [2, 2]
    plan.scores = [[1.0, 0.6], [0.55, 0.2]]  # the largest drop comes after the first sentence

    def sent(c):
        r = plan.pack(400, c, TOK)
        return " ".join(s.chunk.text for s in r.kept), r
    plain, _ = sent(cfg)
    assert "group of investors" in plain and "New York" not in plain  # the buffer: the next sentence, whatever
    novel, r = sent(cfg.model_copy(update={"buffer_novelty": 0.1, "buffer_reach": 2}))
    assert "group of investors" not in novel and "New York" in novel
    assert r.stop == "evidence" and "score gap" in r.stop_note
    # without reach, a repeat past the gap ends the evidence there
    alone, r0 = sent(cfg.model_copy(update={"buffer_novelty": 0.1, "buffer_reach": 0}))
    assert "group of investors" not in alone and "New York" not in alone
    assert "adds question terms" in r0.stop_note


CAREER = ("Anna Pavlova trained at the Imperial Ballet School in Saint Petersburg. "
          "In 1906 she became a prima ballerina of the Mariinsky Theatre. "
          "Three years later she toured Paris with the Ballets Russes. "
          "She then founded her own company and performed around the world. "
          "Pavlova died of pleurisy in The Hague in 1931.")


def test_a_follow_up_goes_on_from_where_the_last_answer_came_from(scorer):
    """'What happened after that?' echoes nothing; the sentence after the one the last answer quoted is where a
    conversation about a document goes next: it alone is chosen, and the ledger's note says why. Without the
    history (or with dialog_flow 0) nothing points there: the evidence is diffuse and more is sent."""
    from ragbudget.budget.trim import SentencePlan
    doc = [Scored(Chunk(id="c0", doc_id="pavlova", text=CAREER, metadata={"title": "Anna Pavlova"}), score=0.8),
           Scored(Chunk(id="c1", doc_id="paris", text=PARIS), score=0.5)]
    answer = "In 1906 she became a prima ballerina of the Mariinsky Theatre."
    question = "What happened after that?"
    nxt = "Three years later she toured Paris with the Ballets Russes."
    cfg = TrimConfig(followup_parent_share=0)  # dialog flow alone (the parent rule is tested above)
    with_flow = SentencePlan.build(question, doc, TOK, scorer, cfg, previous_answer=answer).pack(400, cfg, TOK)
    assert [s.chunk.text for s in with_flow.kept] == [nxt]
    assert "dialog flow: the sentence after the last answer's in 'Anna Pavlova'" in with_flow.stop_note
    for plan_cfg, prev in ((cfg, ""), (TrimConfig(dialog_flow=0, followup_parent_share=0), answer)):
        plain = SentencePlan.build(question, doc, TOK, scorer, plan_cfg, previous_answer=prev).pack(400, plan_cfg, TOK)
        assert plain.used > with_flow.used
        assert "dialog flow" not in plain.stop_note
    # an answer that no candidate sentence resembles leads nowhere
    unrelated = SentencePlan.build(question, doc, TOK, scorer, cfg, previous_answer="Bananas are berries.")
    assert unrelated.flow == []


def test_a_title_line_the_first_sentence_repeats_is_paid_for_once(scorer):
    """Records are indexed as ``title\\n\\ntext``. When the first sentence names the title again (qualifier
    aside) the title line is scored with it but not sent, and the citation header does not repeat it either;
    a first sentence that does not name the title keeps its title line (the only place the name appears).
    Naming it: the phrase anywhere in the sentence ("The Memphis Hustle are …"), or every word of a title of
    two words or more ("Warren Edward Buffett" names "Warren Buffett"); "Tomori was born …" does not."""
    from ragbudget.stages.prompt import render_documents
    q = "Which component of shellite has the formula (ON)CHOH?"
    cands = _docs([("Shellite (explosive)", "Shellite (explosive)\n\nShellite is an explosive mixture of picric "
                    "acid and dinitrophenol. It was used in British naval shells."),
                   ("Picric acid", "Picric acid\n\nPicric acid is an organic compound with the formula (ON)CHOH. "
                    "Its name comes from the Greek word for bitter."),
                   ("Warren Buffett", "Warren Buffett\n\nWarren Edward Buffett is an American investor. "
                    "He described owner earnings in 1986."),
                   ("Memphis Hustle", "Memphis Hustle\n\nThe Memphis Hustle are a basketball team. "
                    "They play in Southaven."),
                   ("Oyewale Tomori", "Oyewale Tomori\n\nTomori was born in Ilesa. He is a virologist.")],
                  [0.9, 0.8, 0.1, 0.1, 0.1])
    cfg = TrimConfig(sentence_window=0, parent_share=0, evidence_floor=0.0, gap_window=0, bridge=0,
                     coverage_floor=0.0)
    r = trim_chunks(q, cands, 400, TOK, scorer, cfg)
    texts = {s.chunk.doc_id: s.chunk.text for s in r.kept}
    assert texts["doc0"].startswith("Shellite is an explosive mixture")
    assert texts["doc1"].startswith("Picric acid is an organic compound")
    # every word of the title in the first sentence, or the phrase anywhere in it, names it
    assert texts["doc2"].startswith("Warren Edward Buffett is")
    assert texts["doc3"].startswith("The Memphis Hustle are")
    assert texts["doc4"].startswith("Oyewale Tomori\n\nTomori was born")  # only the title says who "Tomori" is
    sentences = sum(len(split_sentences(t)) for t in texts.values())
    assert r.used <= sum(TOK.count(t) for t in texts.values()) + sentences  # the dropped lines are not counted
    rendered = render_documents(r.kept)
    assert rendered.count("Shellite") == 1 and rendered.count("Picric acid") == 1
    assert "Shellite (explosive)" not in rendered  # "Shellite is …" names it: no "[1] Shellite (explosive)" header
    assert rendered.count("Memphis Hustle") == 1 and rendered.count("Warren") == 1  # nor a header repeating it
    assert rendered.count("Oyewale Tomori") == 1


def _hotpot_record(shared_data, doc_id):
    import json
    with (shared_data / "eval" / "hotpot_dev" / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["_id"] == doc_id:
                return rec
    raise AssertionError(f"{doc_id} not in hotpot_dev")


def test_glosses_in_a_script_the_question_does_not_use_are_not_sent(scorer, shared_data):
    """A real HotpotQA record: Gorbachev's first sentence glosses his name in Cyrillic. An English question gets
    the sentence without that part of the parenthesis (its birth date stays); a question that names the gloss's
    language ("… his Russian name?") or is written in its script keeps it; the option off keeps everything."""
    rec = _hotpot_record(shared_data, "Mikhail_Gorbachev")
    cands = _docs([(rec["title"], rec["title"] + "\n\n" + rec["text"])], [0.9])
    cfg = TrimConfig(gap_window=0, bridge=0, evidence_floor=0.9)

    def first(q, **over):
        r = trim_chunks(q, cands, 400, TOK, scorer, cfg.model_copy(update=over))
        return r.kept[0].chunk.text, r.used

    q = "When was the former Soviet statesman Mikhail Gorbachev born?"
    text, used = first(q)
    assert "born 2 March 1931" in text and "Gorbachev" in text
    note = trim_chunks(q, cands, 400, TOK, scorer, cfg).stop_note
    assert "asides:" in note and "left out" in note  # the ledger says text was shortened
    assert not any("\u0400" <= ch <= "\u04ff" for ch in text) and "]" not in text.split("is a former")[0]
    full, used_full = first(q, drop_foreign_glosses=False)
    assert "\u0413\u043e\u0440\u0431\u0430\u0447" in full and used < used_full - 10  # Cyrillic is costly in tokens
    assert "\u0413\u043e\u0440\u0431\u0430\u0447" in first("What is Mikhail Gorbachev's Russian name?")[0]
    assert "\u0413\u043e\u0440\u0431\u0430\u0447" in first("Когда родился Mikhail Gorbachev, Soviet statesman?")[0]


def test_drop_foreign_glosses_keeps_what_the_reader_can_use():
    from ragbudget.budget.evidence import prune_parentheses as drop_foreign_glosses, question_scripts
    latin = question_scripts("Where is it?")
    words = frozenset({"where"})
    assert drop_foreign_glosses('Seven Brief Lessons (Italian: "" ) is a book.', latin, words) == \
        "Seven Brief Lessons is a book."  # a label whose text is gone goes too
    assert drop_foreign_glosses("Beijing (\u5317\u4eac) has 21 million people (2020).", latin, words) == \
        "Beijing has 21 million people (2020)."
    assert drop_foreign_glosses("Gorbachev (/\u02c8\u0261\u0254\u02d0rb\u0259t\u0283\u0252f/; born 1931) was.",
                                latin, words) == "Gorbachev (born 1931) was."  # a pronunciation
    assert drop_foreign_glosses("Atsushi Sakurai (\u6afb\u4e95 \u6566\u53f8 , Sakurai Atsushi , born March 7, 1966 in "
                                "Fujioka, Gunma) is a singer.", latin, words) == \
        "Atsushi Sakurai (Sakurai Atsushi, born March 7, 1966 in Fujioka, Gunma) is a singer."  # only the name goes
    kept = "The Lyc\u00e9e Henri-IV (French: Lyc\u00e9e Henri-IV) is in Paris (France)."
    assert drop_foreign_glosses(kept, latin, words) == kept  # Latin script, accents or not, stays


def test_life_dates_go_only_when_the_question_does_not_ask_about_time(scorer, shared_data):
    """A real HotpotQA record opening with life dates: a question about clubs gets the sentence without them; a
    question asking when (or which came first) keeps them; ``drop_unasked_dates: false`` keeps them always."""
    from ragbudget.budget.evidence import asks_about_time
    rec = _hotpot_record(shared_data, "Ernest_Mangnall")
    cands = _docs([(rec["title"], rec["title"] + "\n\n" + rec["text"])], [0.9])
    cfg = TrimConfig(gap_window=0, bridge=0, evidence_floor=0.9)

    def first(q, **over):
        return trim_chunks(q, cands, 400, TOK, scorer, cfg.model_copy(update=over)).kept[0].chunk.text

    clubs = "Which clubs did the English football manager Ernest Mangnall manage?"
    assert not asks_about_time(clubs) and asks_about_time("When did Ernest Mangnall die?")
    assert "1866" not in first(clubs) and "Manchester United" in first(clubs)
    assert "1866" in first(clubs, drop_unasked_dates=False)
    assert "1866" in first("When was the football manager Ernest Mangnall born?")
    assert "1866" in first("Who was born first, Ernest Mangnall or Alex Ferguson?")
    from ragbudget.budget.evidence import prune_parentheses, question_scripts
    latin = question_scripts("Which?")
    assert prune_parentheses("Cards (5 and 6) and the band (formed in 1990).", latin, frozenset(), dates=True) == \
        "Cards (5 and 6) and the band (formed in 1990)."  # numbers that are no dates, and words, stay
