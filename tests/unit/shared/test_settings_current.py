"""``evidentia settings --current`` prints the values in force with every secret masked."""

from __future__ import annotations

import argparse
import json

import pytest

from cli import settings as settings_command
from shared.settings import get_settings


def test_settings_current_prints_no_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EVIDENTIA_DATABASE_URL", "postgresql://evidentia:db-secret@db.internal:5432/evidentia")
    monkeypatch.setenv("EVIDENTIA_DATABASE_SEARCH_URL", "postgresql://evidentia:replica-secret@db-ro:5432/evidentia")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("EVIDENTIA_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("EVIDENTIA_KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("EVIDENTIA_KAFKA_SASL_PASSWORD", "kafka-secret")
    get_settings.cache_clear()
    try:
        assert settings_command.run(argparse.Namespace(current=True)) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    for secret in ("db-secret", "replica-secret", "sk-ant-secret", "kafka-secret"):
        assert secret not in out
    printed = json.loads(out)
    assert printed["database"]["url"] == "postgresql://evidentia:***@db.internal:5432/evidentia"
    assert printed["database"]["search_url"] == "postgresql://evidentia:***@db-ro:5432/evidentia"
    assert printed["kafka"]["sasl_username"] == "svc" and printed["kafka"]["sasl_password"] == "**********"


def test_a_blank_search_url_means_the_primary(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.settings import DatabaseSettings, RetrievalSettings

    monkeypatch.setenv("EVIDENTIA_DATABASE_SEARCH_URL", "")  # a Secret key left blank
    assert DatabaseSettings().search_url is None
    monkeypatch.setenv("EVIDENTIA_DATABASE_SEARCH_URL", "postgresql://e:pw@db-ro/evidentia")
    assert DatabaseSettings().search_url == "postgresql://e:pw@db-ro/evidentia"
    monkeypatch.setenv("EVIDENTIA_RETRIEVAL_ROLE", "searcher")
    with pytest.raises(ValueError, match="'all', 'store' or 'search'"):
        RetrievalSettings()
