"""Claude through the anthropic SDK: whole or streamed answers, and the evidence summary through tool use.

The system prompt is the same for every call and marked for prompt caching. The SDK (2.x) has no typed
``temperature`` argument, so it goes in the request body (``extra_body``), which the API accepts. Every call
goes through :mod:`shared.llm`, which counts its tokens (Prometheus) and records it in the answer's ledger
(``ledger=``): the answer and the evidence summary use ``EVIDENTIA_LLM_MODEL``, the claim-support check the
fast model (``EVIDENTIA_LLM_FAST_MODEL``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic

from services.synthesizer.agreement import AGREEMENT_TOOL, agreement_tool
from services.synthesizer.prompts import (
    AGREEMENT_SYSTEM_PROMPT,
    SUMMARY_INSTRUCTION,
    SUPPORT_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    agreement_message,
    support_message,
    user_message,
)
from services.synthesizer.summary import TOOL_NAME, summary_tool
from services.synthesizer.support import SUPPORT_TOOL, support_tool
from shared.events import ChatTurn
from shared.llm import UsageLedger, anthropic_client, create_message, stream_message
from shared.models import SearchHit
from shared.settings import LlmSettings, SupportSettings

log = logging.getLogger(__name__)
SERVICE = "synthesizer"


def history_messages(history: Sequence[ChatTurn]) -> list[dict[str, Any]]:
    """Earlier turns as alternating user/assistant messages starting with a user one (as the API requires)."""
    out: list[dict[str, Any]] = []
    for turn in history:
        if not turn.content.strip():
            continue
        if not out and turn.role != "user":
            continue
        if out and out[-1]["role"] == turn.role:
            out[-1]["content"] += "\n\n" + turn.content
        else:
            out.append({"role": turn.role, "content": turn.content})
    if out and out[-1]["role"] == "user":  # the new question comes as a user message next
        out.pop()
    return out


class ClaudeAnswerer:
    def __init__(
        self,
        settings: LlmSettings,
        client: anthropic.AsyncAnthropic | None = None,
        support: SupportSettings | None = None,
    ):
        self.settings = settings
        self.support_settings = support or SupportSettings()
        if client is None:
            assert settings.anthropic_api_key is not None, "ClaudeAnswerer needs ANTHROPIC_API_KEY"
            client = anthropic_client(settings, max_retries=2)
        self.client = client

    @property
    def model(self) -> str:
        return self.settings.model

    def _params(
        self, question: str, hits: Sequence[SearchHit], history: Sequence[ChatTurn] = (), suffix: str = ""
    ) -> dict[str, Any]:
        return {
            "model": self.settings.model,
            "max_tokens": self.settings.max_tokens,
            "system": [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
            "messages": [
                *history_messages(history),
                {"role": "user", "content": user_message(question, hits) + suffix},
            ],
            "extra_body": {"temperature": self.settings.temperature},
        }

    @property
    def support_model(self) -> str:
        return self.support_settings.model or self.settings.fast_model

    async def answer(
        self,
        question: str,
        hits: Sequence[SearchHit],
        history: Sequence[ChatTurn] = (),
        *,
        ledger: UsageLedger | None = None,
    ) -> str:
        """Claude's answer to ``question`` from the numbered ``hits`` (with the conversation ``history``), whole;
        the call is recorded in ``ledger``."""
        message = await create_message(
            self.client, service=SERVICE, step="answer", ledger=ledger, **self._params(question, hits, history)
        )
        return "".join(block.text for block in message.content if block.type == "text")

    async def stream(
        self,
        question: str,
        hits: Sequence[SearchHit],
        history: Sequence[ChatTurn] = (),
        *,
        ledger: UsageLedger | None = None,
    ) -> AsyncIterator[str]:
        """Claude's answer to ``question`` from ``hits``, as the text deltas arrive."""
        params = self._params(question, hits, history)
        async with stream_message(self.client, service=SERVICE, step="answer", ledger=ledger, **params) as stream:
            async for text in stream.text_stream:
                yield text

    async def summary(
        self, question: str, hits: Sequence[SearchHit], *, ledger: UsageLedger | None = None
    ) -> dict[str, Any] | None:
        """The tool input Claude gives for ``record_evidence_summary`` (forced), or None if it gives none."""
        params = self._params(question, hits, (), SUMMARY_INSTRUCTION)
        params["tools"] = [summary_tool()]
        params["tool_choice"] = {"type": "tool", "name": TOOL_NAME}
        message = await create_message(self.client, service=SERVICE, step="summary", ledger=ledger, **params)
        for block in message.content:
            if block.type == "tool_use" and block.name == TOOL_NAME and isinstance(block.input, dict):
                return dict(block.input)
        log.warning("no evidence summary tool call in the reply", extra={"stop_reason": message.stop_reason})
        return None

    async def judge_support(
        self, claims: Sequence[tuple[str, Sequence[SearchHit]]], *, ledger: UsageLedger | None = None
    ) -> list[float] | None:
        """Claude's support score (0-1) of each (sentence, cited passages), in order; None without a usable reply."""
        params: dict[str, Any] = {
            "model": self.support_model,
            "max_tokens": min(2000, 60 * len(claims) + 200),
            "system": [{"type": "text", "text": SUPPORT_SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": support_message(claims)}],
            "tools": [support_tool()],
            "tool_choice": {"type": "tool", "name": SUPPORT_TOOL},
            "extra_body": {"temperature": 0.0},
        }
        message = await create_message(self.client, service=SERVICE, step="support_check", ledger=ledger, **params)
        for block in message.content:
            if block.type == "tool_use" and block.name == SUPPORT_TOOL and isinstance(block.input, dict):
                scores: dict[int, float] = {}
                verdicts = block.input.get("verdicts")
                for v in verdicts if isinstance(verdicts, list) else []:
                    try:
                        scores[int(v["claim"])] = min(1.0, max(0.0, float(v["support"])))
                    except (KeyError, TypeError, ValueError):
                        continue
                if all(i in scores for i in range(1, len(claims) + 1)):
                    return [scores[i] for i in range(1, len(claims) + 1)]
        log.warning("no complete claim-support verdict in the reply", extra={"stop_reason": message.stop_reason})
        return None

    async def agreement(
        self, question: str, answer: str, hits: Sequence[SearchHit], *, ledger: UsageLedger | None = None
    ) -> dict[str, Any] | None:
        """The tool input Claude gives for ``record_source_agreement`` (forced) on ``answer`` and the passages it
        cites, unchecked; None if it gives none. The call is recorded in ``ledger``."""
        params: dict[str, Any] = {
            "model": self.settings.model,
            "max_tokens": min(2000, 80 * len(hits) + 300),
            "system": [{"type": "text", "text": AGREEMENT_SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": agreement_message(question, answer, hits)}],
            "tools": [agreement_tool()],
            "tool_choice": {"type": "tool", "name": AGREEMENT_TOOL},
            "extra_body": {"temperature": 0.0},
        }
        message = await create_message(self.client, service=SERVICE, step="agreement", ledger=ledger, **params)
        for block in message.content:
            if block.type == "tool_use" and block.name == AGREEMENT_TOOL and isinstance(block.input, dict):
                return dict(block.input)
        log.warning("no source agreement tool call in the reply", extra={"stop_reason": message.stop_reason})
        return None

    async def aclose(self) -> None:
        """Close the Anthropic client."""
        await self.client.close()
