"""Claude for the workflows' small structured steps: one forced tool call returns validated JSON.

Each step (normalise a disease name, expand search terms, classify a question, rewrite a query) asks for
one tool call whose input schema says what is wanted. Without an API key :class:`WorkflowLlm` is
unavailable and every caller uses its rule-based fallback; a failed or malformed call does the same.
The steps run on the fast model (``EVIDENTIA_LLM_FAST_MODEL``) unless the caller names another (the guideline
assessment, which is answer writing, takes ``model``); each call is recorded by :mod:`shared.llm`.
"""

from __future__ import annotations

import logging
from typing import Any

import anthropic

from shared.llm import anthropic_client, create_message
from shared.settings import LlmSettings

log = logging.getLogger(__name__)


class WorkflowLlm:
    def __init__(self, settings: LlmSettings, client: anthropic.AsyncAnthropic | None = None):
        self.settings = settings
        if client is None and settings.anthropic_api_key is not None:
            client = anthropic_client(settings, max_retries=1)
        self.client = client

    @property
    def available(self) -> bool:
        return self.client is not None

    @property
    def model(self) -> str:
        """The model that writes answers."""
        return self.settings.model

    @property
    def fast_model(self) -> str:
        """The model of the small structured steps."""
        return self.settings.fast_model

    async def tool(
        self,
        prompt: str,
        name: str,
        description: str,
        schema: dict[str, Any],
        *,
        max_tokens: int = 800,
        step: str | None = None,
        model: str | None = None,
    ) -> dict[str, Any] | None:
        """The input of the forced call to tool ``name``; None without a client or on any failure.

        ``step`` names the call in the usage records (default: the tool's name); ``model`` defaults to the
        fast model.
        """
        if self.client is None:
            return None
        try:
            message = await create_message(
                self.client,
                service="gateway",
                step=step or name,
                model=model or self.settings.fast_model,
                max_tokens=max_tokens,
                messages=[{"role": "user", "content": prompt}],
                tools=[{"name": name, "description": description, "input_schema": schema}],  # type: ignore[list-item]
                tool_choice={"type": "tool", "name": name},
                extra_body={"temperature": 0.0},
            )
        except Exception as exc:  # a helper step: the caller falls back to its rules
            log.warning("workflow LLM step failed", extra={"tool": name, "error": repr(exc)[:300]})
            return None
        for block in message.content:
            if block.type == "tool_use" and block.name == name and isinstance(block.input, dict):
                return dict(block.input)
        log.warning("workflow LLM step gave no tool call", extra={"tool": name})
        return None

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.close()
