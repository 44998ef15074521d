"""Claude through the anthropic SDK: whole or streamed answers. The system prompt is marked for caching."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic

from services.synthesizer.prompts import SYSTEM_PROMPT, user_message
from shared.models import SearchHit
from shared.settings import LlmSettings


class ClaudeAnswerer:
    def __init__(self, settings: LlmSettings, client: anthropic.AsyncAnthropic | None = None):
        self.settings = settings
        if client is None:
            assert settings.anthropic_api_key is not None, "ClaudeAnswerer needs ANTHROPIC_API_KEY"
            client = anthropic.AsyncAnthropic(
                api_key=settings.anthropic_api_key.get_secret_value(),
                base_url=settings.anthropic_base_url,
                timeout=settings.timeout_s,
                max_retries=2,
            )
        self.client = client

    @property
    def model(self) -> str:
        return self.settings.model

    def _params(self, question: str, hits: Sequence[SearchHit]) -> dict[str, Any]:
        return {
            "model": self.settings.model,
            "max_tokens": self.settings.max_tokens,
            "system": [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": user_message(question, hits)}],
            # Not a typed argument in every SDK version; the API accepts it in the body.
            "extra_body": {"temperature": self.settings.temperature},
        }

    async def answer(self, question: str, hits: Sequence[SearchHit]) -> str:
        message = await self.client.messages.create(**self._params(question, hits))
        return "".join(block.text for block in message.content if getattr(block, "type", "") == "text")

    async def stream(self, question: str, hits: Sequence[SearchHit]) -> AsyncIterator[str]:
        async with self.client.messages.stream(**self._params(question, hits)) as stream:
            async for text in stream.text_stream:
                yield text

    async def aclose(self) -> None:
        await self.client.close()
