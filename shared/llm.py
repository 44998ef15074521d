"""The Anthropic client the services build from :class:`~shared.settings.LlmSettings`."""

from __future__ import annotations

import anthropic

from shared.settings import LlmSettings


def anthropic_client(
    settings: LlmSettings, *, max_retries: int, timeout_s: float | None = None
) -> anthropic.AsyncAnthropic:
    """An async client with the settings' API key and base URL; ``timeout_s`` defaults to the settings'."""
    if settings.anthropic_api_key is None:
        raise ValueError("an Anthropic client needs ANTHROPIC_API_KEY")
    return anthropic.AsyncAnthropic(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        timeout=settings.timeout_s if timeout_s is None else timeout_s,
        max_retries=max_retries,
    )
