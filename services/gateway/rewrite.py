"""Follow-up questions rewritten into standalone ones, so retrieval finds what the conversation is about.

With an Anthropic API key Claude (the fast model, ``EVIDENTIA_LLM_FAST_MODEL``) rewrites the question from
the conversation so far; without one (or when the call fails) a simple rule does: a question that reads
like a follow-up (a pronoun such as "it" or "they", an opening such as "what about", or too few words of its
own) gets the previous standalone question appended as context. A question that stands on its own is left as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import anthropic

from shared.events import ChatTurn
from shared.llm import UsageLedger, anthropic_client, create_message
from shared.settings import LlmSettings

log = logging.getLogger(__name__)

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
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
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "may",
        "of",
        "on",
        "or",
        "than",
        "that",
        "the",
        "their",
        "them",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "about",
        "any",
        "also",
        "else",
        "more",
    ]
)

REWRITE_PROMPT = """Rewrite the last question of this conversation about the medical literature into one \
standalone search question that can be understood without the conversation (resolve pronouns and \
references, keep every medical term). If it already stands alone, return it unchanged. Reply with the \
question only.

Conversation so far:
{history}

Last question: {question}

Standalone question:"""


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2]


def is_follow_up(question: str) -> bool:
    return bool(_REFERRING.search(question) or _OPENING.search(question)) or len(content_words(question)) < 3


def rule_rewrite(question: str, previous: str | None) -> str:
    """The offline rule: append the previous standalone question as context to a follow-up."""
    q = question.strip()
    if not previous or not is_follow_up(q):
        return q
    return f"{q.rstrip(' ?')} (follow-up to: {previous.strip().rstrip(' ?')})?"


class FollowUpRewriter:
    def __init__(self, settings: LlmSettings, client: anthropic.AsyncAnthropic | None = None):
        self.settings = settings
        if client is None and settings.anthropic_api_key is not None:
            client = anthropic_client(settings, max_retries=1, timeout_s=min(settings.timeout_s, 20.0))
        self.client = client

    @property
    def mode(self) -> str:
        return "llm" if self.client is not None else "rule"

    async def rewrite(
        self,
        question: str,
        history: Sequence[ChatTurn],
        previous: str | None,
        *,
        ledger: UsageLedger | None = None,
    ) -> str:
        """The standalone question; a Claude call it makes is recorded in ``ledger``."""
        if not history and not previous:
            return question.strip()
        if self.client is not None:
            try:
                text = await self._claude(question, history, ledger)
                if text and len(text) <= 2000:
                    return text
            except Exception as exc:  # rewriting is a help, never a failure of the turn
                log.warning("follow-up rewriting failed; using the rule", extra={"error": repr(exc)[:300]})
        return rule_rewrite(question, previous)

    async def _claude(self, question: str, history: Sequence[ChatTurn], ledger: UsageLedger | None) -> str:
        assert self.client is not None
        lines = [f"{'User' if t.role == 'user' else 'Assistant'}: {t.content[:1500]}" for t in history]
        message = await create_message(
            self.client,
            service="gateway",
            step="rewrite",
            ledger=ledger,
            model=self.settings.fast_model,
            max_tokens=200,
            messages=[
                {
                    "role": "user",
                    "content": REWRITE_PROMPT.format(history="\n".join(lines), question=question.strip()),
                }
            ],
            extra_body={"temperature": 0.0},
        )
        text = "".join(block.text for block in message.content if block.type == "text").strip()
        return text.splitlines()[0].strip().strip('"') if text else ""

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.close()
