"""The workflows' LLM steps, asked of the synthesizer over Kafka (``llm.steps.requests``).

The synthesizer owns each step's prompt, tool schema and model (services/synthesizer/steps.py); the gateway
sends the step's name and inputs and gets the result back, or None (no API key configured, a failed or
malformed call, no reply), when every caller uses its rule-based fallback. The calls the synthesizer made
come back in the reply and are added to the current answer's ledger (:func:`shared.llm.absorb`).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from shared.events import LlmStepName, LlmStepReply, LlmStepRequest
from shared.llm import UsageLedger, absorb
from shared.settings import LlmSettings

log = logging.getLogger(__name__)


class StepTransport(Protocol):
    async def run_step(self, request: LlmStepRequest) -> LlmStepReply: ...


class WorkflowLlm:
    def __init__(self, settings: LlmSettings, transport: StepTransport | None = None):
        self.settings = settings
        self.transport = transport

    @property
    def available(self) -> bool:
        """Whether the steps have a model: an API key is configured (the synthesizer holds the client)."""
        return self.transport is not None and self.settings.anthropic_api_key is not None

    @property
    def model(self) -> str:
        """The model that writes answers (the guideline assessment, the agent)."""
        return self.settings.model

    async def step(
        self, name: LlmStepName, inputs: dict[str, Any], *, ledger: UsageLedger | None = None
    ) -> dict[str, Any] | None:
        """The step's output; None without a model or on any failure. The calls it made are added to
        ``ledger`` (default: the current scope's)."""
        if not self.available:
            return None
        assert self.transport is not None
        try:
            reply = await self.transport.run_step(LlmStepRequest(step=name, inputs=inputs))
        except Exception as exc:  # a helper step: the caller falls back to its rules
            log.warning("workflow LLM step failed", extra={"step": name, "error": repr(exc)[:300]})
            return None
        _count(reply, ledger)
        return reply.output

    async def turn(self, inputs: dict[str, Any]) -> LlmStepReply:
        """One agent turn (raises when the model call failed); its calls are added to the current ledger."""
        assert self.transport is not None, "agentic mode with a model needs an API key"
        reply = await self.transport.run_step(LlmStepRequest(step="agent_turn", inputs=inputs))
        _count(reply, None)
        return reply


def _count(reply: LlmStepReply, ledger: UsageLedger | None) -> None:
    if ledger is not None:
        ledger.extend(reply.llm_calls)
    else:
        absorb(reply.llm_calls)
