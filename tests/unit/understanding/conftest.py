"""The fake Anthropic server the understanding's LLM steps run against (the workflows' fixture)."""

from tests.unit.workflows.conftest import fake_llm

__all__ = ["fake_llm"]
