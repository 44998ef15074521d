"""docs/settings.md is the table the code generates, so it stays true."""

from __future__ import annotations

from pathlib import Path

import pytest

from docgen.settings_table import SETTINGS_DOC, document, main
from shared.settings import Settings, settings_markdown, settings_table

REPO = Path(__file__).resolve().parents[3]


def test_the_settings_doc_matches_the_code() -> None:
    text = (REPO / "docs" / "settings.md").read_text()
    assert SETTINGS_DOC == REPO / "docs" / "settings.md"
    assert text == document(), "docs/settings.md is stale: run `python -m docgen.settings_table`"
    assert text.endswith(settings_markdown())
    assert main(["--check"]) == 0


def test_the_check_fails_on_a_stale_settings_doc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(document().replace("EVIDENTIA_KAFKA_BOOTSTRAP", "EVIDENTIA_KAFKA_BOOTSTRAPS"))
    monkeypatch.setattr("docgen.settings_table.SETTINGS_DOC", stale)
    assert main(["--check"]) == 1
    monkeypatch.setattr("docgen.settings_table.SETTINGS_DOC", tmp_path / "absent.md")
    assert main(["--check"]) == 1


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
