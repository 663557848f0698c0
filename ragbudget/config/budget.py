"""Config sections of the prompt: token budgets per section, trimming, prompt layout and response modes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..errors import BudgetConfigError
from .base import _Section


class SectionBudget(_Section):
    cap: int | None = Field(None, ge=0)  # absolute tokens
    ratio: float | None = Field(None, ge=0, le=1)  # share of the window
    # tokens reserved for the answer at least
    # tokens the history section keeps even when others are over budget
    # tokens the question keeps even when others are over budget
    # tokens the retrieved context keeps even when others are over budget
    # tokens the system section keeps even when others are over budget
    min: int = Field(0, ge=0)

    def limit(self, window: int) -> int:
        """The one budget rule, used by config checks, allocation and the question limit alike: the
        section's ceiling in a ``window``-token window is its cap, or ratio × window, or the smaller of the
        two when both are set. Raises :class:`BudgetConfigError` when neither is set."""
        limits = [self.cap] if self.cap is not None else []
        if self.ratio is not None:
            limits.append(int(self.ratio * window))
        if not limits:
            raise BudgetConfigError("a budget section has neither cap nor ratio", fix="set cap or ratio")
        return max(min(limits), 0)


class BudgetConfig(_Section):
    # tokens of the prompt window the sections are budgeted from (the smallest tier's window when tiers are smaller)
    context_window: int = Field(8192, ge=128)
    system: SectionBudget = SectionBudget(cap=512)
    history: SectionBudget = SectionBudget(cap=1024)
    retrieved: SectionBudget = SectionBudget(cap=1000)
    question: SectionBudget = SectionBudget(cap=256)
    output: SectionBudget = SectionBudget(cap=512)
    # Lending: unused budget of the first section flows to the second, in order.
    # Unused budget is lent along these (lender, borrower) pairs. None by default: a budget is a ceiling,
    # and lending unused history to the retrieved section would only make the prompt longer.
    lend: list[tuple[str, str]] = []
    strict: bool = False  # True: a question over its budget is an error, not a truncation
    safety_margin: int = Field(16, ge=0)  # chat-template overhead per request

    @model_validator(mode="after")
    def _fits_window(self) -> "BudgetConfig":
        names = ("system", "history", "retrieved", "question", "output")
        total = 0
        for n in names:
            s: SectionBudget = getattr(self, n)
            if s.cap is None and s.ratio is None:
                raise BudgetConfigError(f"budget.{n}: set cap or ratio",
                                        fix=f"give budget.{n} a cap (tokens) or a ratio (share of the window)")
            fixed = s.limit(self.context_window)
            if s.min > fixed:
                raise BudgetConfigError(f"budget.{n}.min ({s.min}) exceeds its cap ({fixed})",
                                        fix=f"lower budget.{n}.min or raise its cap")
            if n == "output" and fixed < 1:  # (the question's room is checked with its limit, in Config)
                src = "cap" if s.ratio is None else f"ratio × context_window ({s.ratio} × {self.context_window})"
                raise BudgetConfigError(f"budget.{n}: {src} gives {fixed} tokens; the {n} needs at least 1",
                                        fix=f"set budget.{n}.cap to a positive number of tokens")
            total += fixed
        total += self.safety_margin
        if total > self.context_window:
            raise BudgetConfigError(
                f"budget sections add up to {total} tokens, over budget.context_window={self.context_window}",
                fix="lower a section's cap/ratio or raise budget.context_window")
        for a, b in self.lend:
            if a not in names or b not in names:
                raise BudgetConfigError(f"budget.lend: unknown section in ({a!r}, {b!r}); use {names}",
                                        fix=f"name sections from {names} in budget.lend")
        return self

    def section_tokens(self, name: str) -> int:
        """A section's configured ceiling in tokens at ``context_window`` (:meth:`SectionBudget.limit`)."""
        s: SectionBudget = getattr(self, name)
        return s.limit(self.context_window)


#: Tokens the prompt spends on the "Question: " label (the builder counts them with the question).
QUESTION_LABEL_TOKENS = 4


class TrimConfig(_Section):
    # trim retrieved chunks to the sentences that carry evidence for the question (false: whole chunks)
    sentence_selection: bool = True
    # order of kept sentences: relevance (best first) or edges (best at the start and end of the context)
    order: Literal["relevance", "edges"] = "relevance"
    # sentences scoring under this are never kept
    min_sentence_score: float = 0.0
    # sentence score = sentence_weight × cosine(question, sentence) + lexical_weight × the share of the
    # question's term weight (BM25 idf) the sentence holds + rank_prior / (1 + chunk rank / 3)
    sentence_weight: float = Field(1.0, ge=0, le=4)
    # weight of the question's term-weight share in a sentence's score (see sentence_weight)
    lexical_weight: float = Field(1.0, ge=0, le=4)
    # weight of the chunk's retrieval rank in a sentence's score (see sentence_weight)
    rank_prior: float = Field(0.3, ge=0, le=4)
    # A budget is a ceiling: stop adding sentences once the next one scores under evidence_floor × the best
    # one (0 fills the budget). Sentences within window_floor × best bring their neighbours (sentence_window
    # on each side) so a pronoun's referent comes along.
    adaptive: bool = True
    # stop adding sentences once the next scores under this × the best one (0 fills the budget)
    evidence_floor: float = Field(0.65, ge=0, le=1)
    # neighbouring sentences on each side that come along with a very good sentence
    sentence_window: int = Field(0, ge=0, le=5)
    # sentences within this × the best score bring their neighbours (sentence_window)
    window_floor: float = Field(0.9, ge=0, le=1)
    # a chosen sentence that opens with a pronoun or demonstrative ("He …", "This …") brings the sentence
    # before it, whatever sentence_window says
    anaphora: bool = True
    # ...and once the context holds coverage_stop of the question's term weight (idf), a sentence under
    # coverage_floor × best is not needed either
    coverage_stop: float = Field(0.9, ge=0, le=1)
    # once coverage_stop is reached, sentences under this × the best score are left out
    coverage_floor: float = Field(0.8, ge=0, le=1)
    # adaptive-k over sentences: among the gap_window + 1 best candidate sentences, the largest drop in score
    # ends the evidence (0 turns the gap stop off)
    gap_window: int = Field(4, ge=0, le=50)
    # sentences still taken past the largest score drop (a second hop often scores just under the first)
    gap_buffer: int = Field(1, ge=0, le=10)
    # a sentence taken only as gap_buffer must add at least this share of the question's term weight (idf)
    # that the context does not hold yet — the other half of a two-part question — else it is skipped
    # (0 takes the next sentence whatever it holds; a repeat of the first hop costs tokens for nothing)
    buffer_novelty: float = Field(0.1, ge=0, le=1)
    # with buffer_novelty: how many more candidates past the gap are looked at for such a sentence
    buffer_reach: int = Field(2, ge=0, le=20)
    # multi-hop: up to this many candidate documents whose title the kept evidence names (the bridge entity)
    # send their best sentences too (0 turns this off)
    bridge: int = Field(1, ge=0, le=5)
    bridge_sentences: int = Field(2, ge=1, le=10)  # the best sentences a bridged document sends
    # parent/child: when the best sentence holds under parent_confidence of the question's term weight, its
    # whole chunk goes in, if the chunk takes at most parent_share of the budget (0 turns this off)
    parent_share: float = Field(0.0, ge=0, le=1)
    # when the best sentence holds less than this share of the question's term weight, its whole chunk goes in
    parent_confidence: float = Field(0.9, ge=0, le=1)
    # parent_share for a follow-up (the history holds an answer): "what happened next?" shares few words with
    # its answer, so the best sentence's whole chunk goes in on the same parent_confidence test (0: off)
    followup_parent_share: float = Field(0.25, ge=0, le=1)
    # a conversation about a document moves forward through it: the sentence after the one the last answer
    # came from (its terms overlap the answer's last sentence by at least dialog_flow_match, Jaccard) gains
    # this much evidence score (0 turns this off; only requests whose history holds an answer)
    dialog_flow: float = Field(1.0, ge=0, le=4)
    # the least term overlap (Jaccard) for a sentence to count as the one the last answer came from
    dialog_flow_match: float = Field(0.5, gt=0, le=1)
    # a sentence whose terms overlap a kept one's this much (Jaccard) is a near-duplicate and left out
    duplicate_similarity: float = Field(0.8, ge=0, le=1)
    # a kept sentence goes out without the parts of its parentheses written in a script the question does not
    # use (native names, pronunciations: "( ; Russian: Михаи́л Горбачёв ; born 2 March 1931)" → "(born 2 March
    # 1931)"); a part holding a word of the question stays
    drop_foreign_glosses: bool = True
    # for a question that does not ask about time (when, what year, how old, which came first…), a part of a
    # parenthesis that is dates and nothing else goes too: "(born 11 April 1973)", "(1810 – 1867)"
    drop_unasked_dates: bool = True
    # latest conversation turns kept verbatim; older ones are compressed
    history_recent_turns: int = Field(4, ge=0)
    # how older turns are shortened: extractive (key sentences), llm (a summary by the small tier), none (dropped)
    history_compression: Literal["extractive", "llm", "none"] = "extractive"
    # share of the history budget that compressed older turns may take (the rest keeps recent turns verbatim)
    history_summary_share: float = Field(0.3, ge=0, le=1)


class ModeConfig(_Section):
    max_tokens: int = Field(256, ge=1)
    instruction: str = ""


class PromptConfig(_Section):
    # prompt template version; part of the response-cache key (bump it to invalidate cached answers)
    version: str = "v1"
    # system message: the static start of every prompt (prefix-cache friendly)
    system: str = "Answer from the documents only, citing [n]; if they lack the answer, say so."
    # extra rules appended to the system message, in order
    policies: list[str] = []
    # tool descriptions placed in the static prefix
    tools: list[str] = []
    # example exchanges ({question, answer}) placed in the static prefix
    few_shot: list[dict[str, str]] = []
    # documents placed in every prompt's static prefix, before the retrieved ones
    fixed_docs: list[str] = []
    # ask for compact JSON answers ({"a": answer, "c": [source numbers]}) instead of text
    structured_output: bool = False
    layout: Literal["static-first", "variable-first"] = "static-first"  # variable-first: for benchmarks
    # answer modes by name: max_tokens and an instruction each (a request picks one with mode)
    modes: dict[str, ModeConfig] = {
        "concise": ModeConfig(max_tokens=128, instruction="Answer in one or two sentences."),
        "detailed": ModeConfig(max_tokens=512, instruction="Answer thoroughly, with citations."),
    }
    # mode used when a request names none
    default_mode: str = "concise"

    @model_validator(mode="after")
    def _default_mode_known(self) -> "PromptConfig":
        if self.default_mode not in self.modes:
            raise ValueError(f"default_mode {self.default_mode!r} is not one of {sorted(self.modes)}")
        return self
