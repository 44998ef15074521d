"""The README's settings table is the one the code generates, so it stays true."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.settings import Settings, settings_markdown, settings_table

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_settings_table_matches_the_code() -> None:
    text = README.read_text()
    start, end = "<!-- settings:start -->\n", "<!-- settings:end -->"
    table = text[text.index(start) + len(start) : text.index(end)]
    assert table == settings_markdown(), "README settings table is stale: run `python -m docgen.settings_table`"


def test_every_variable_is_prefixed_and_described() -> None:
    for variable, _default, description in settings_table():
        assert variable.startswith(("EVIDENTIA_", "ANTHROPIC_")), variable
        assert description, f"{variable} has no description"


def test_environment_variables_reach_nested_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVIDENTIA_KAFKA_BOOTSTRAP", "kafka:9092")
    monkeypatch.setenv("EVIDENTIA_DATABASE_URL", "postgresql://x@y/z")
    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODEL", "/models/biolord")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    s = Settings()
    assert s.kafka.bootstrap == "kafka:9092"
    assert s.database.url == "postgresql://x@y/z"
    assert s.embedding.model == "/models/biolord"
    assert s.llm.anthropic_api_key is not None
    assert s.llm.anthropic_api_key.get_secret_value() == "sk-test"
