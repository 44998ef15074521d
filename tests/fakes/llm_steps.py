"""The synthesizer's LLM steps in-process, standing in for the Kafka hop of ``llm.steps.requests``."""

from __future__ import annotations

import anthropic

from services.gateway.intelligence.llm import WorkflowLlm
from services.synthesizer.steps import StepRunner
from shared.events import LlmStepReply, LlmStepRequest
from shared.kafka.reply_client import RemoteError
from shared.settings import LlmSettings


class InProcessSteps:
    """Runs each request with the real :class:`StepRunner` after the JSON round trip the broker makes; an
    error reply is raised as :class:`RemoteError`, as ``ReplyClient`` does."""

    def __init__(self, runner: StepRunner):
        self.runner = runner
        self.requests: list[LlmStepRequest] = []

    async def run_step(self, request: LlmStepRequest) -> LlmStepReply:
        self.requests.append(request)
        reply = await self.runner.run(LlmStepRequest.model_validate_json(request.model_dump_json()))
        reply = LlmStepReply.model_validate_json(reply.model_dump_json())
        if reply.error is not None:
            raise RemoteError(reply.error)
        return reply


def step_llm(settings: LlmSettings, client: anthropic.AsyncAnthropic | None = None) -> WorkflowLlm:
    """The gateway's step client over an in-process synthesizer (offline when ``settings`` has no key)."""
    if settings.anthropic_api_key is None:
        return WorkflowLlm(settings)
    return WorkflowLlm(settings, InProcessSteps(StepRunner(settings, client)))
