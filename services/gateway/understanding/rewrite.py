"""Follow-up questions rewritten into standalone ones, so retrieval finds what the conversation is about.

With an Anthropic API key Claude (the synthesizer's ``rewrite_followup`` step, on the fast model) rewrites
the question from the conversation so far; without one (or when the call fails) a simple rule does: a
question that reads like a follow-up (a pronoun such as "it" or "they", an opening such as "what about",
or too few words of its own) gets the previous standalone question appended as context. A question that
stands on its own is left as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from services.gateway.intelligence.llm import WorkflowLlm
from shared.events import ChatTurn
from shared.llm import UsageLedger
from shared.text import content_words

log = logging.getLogger(__name__)

_REFERRING = re.compile(
    r"\b(it|its|it's|this|that|these|those|they|them|their|theirs|he|she|his|her|such|same|"
    r"the drug|the treatment|the intervention|the condition|the disease|the study|the studies|"
    r"the trial|the trials|above|former|latter)\b",
    re.IGNORECASE,
)
_OPENING = re.compile(
    r"^\s*(what about|how about|and\b|also\b|what else|why\b|how so|any\b|and what|but\b|"
    r"what are the|compared)",
    re.IGNORECASE,
)


def is_follow_up(question: str) -> bool:
    return (
        bool(_REFERRING.search(question) or _OPENING.search(question)) or len(content_words(question, min_length=3)) < 3
    )


def rule_rewrite(question: str, previous: str | None) -> str:
    """The offline rule: append the previous standalone question as context to a follow-up."""
    q = question.strip()
    if not previous or not is_follow_up(q):
        return q
    return f"{q.rstrip(' ?')} (follow-up to: {previous.strip().rstrip(' ?')})?"


class FollowUpRewriter:
    """Rewrites follow-ups with the synthesizer's ``rewrite_followup`` step, or the rule without a model."""

    def __init__(self, llm: WorkflowLlm):
        self.llm = llm

    @property
    def mode(self) -> str:
        return "llm" if self.llm.available else "rule"

    async def rewrite(
        self,
        question: str,
        history: Sequence[ChatTurn],
        previous: str | None,
        *,
        ledger: UsageLedger | None = None,
    ) -> str:
        """The standalone question; a Claude call made for it is recorded in ``ledger``."""
        if not history and not previous:
            return question.strip()
        turns = [{"role": t.role, "content": t.content} for t in history]
        data = await self.llm.step("rewrite_followup", {"history": turns, "question": question}, ledger=ledger)
        text = str((data or {}).get("question") or "").strip()
        if text and len(text) <= 2000:
            return text
        return rule_rewrite(question, previous)
