"""TLS and SASL settings become FastStream's security objects and the raw aiokafka clients' options."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512
from pydantic import SecretStr, ValidationError

from shared.kafka.security import broker_security, client_options, ssl_context
from shared.settings import KafkaSettings, Settings, mask_url


def kafka(**kwargs: object) -> KafkaSettings:
    return KafkaSettings(bootstrap="k1:9093,k2:9093", **kwargs)  # type: ignore[arg-type]


def test_plaintext_is_the_default_and_adds_nothing() -> None:
    k = kafka()
    assert broker_security(k) is None and ssl_context(k) is None
    assert client_options(k) == {"bootstrap_servers": "k1:9093,k2:9093"}


@pytest.mark.parametrize(
    ("mechanism", "kind"),
    [("PLAIN", SASLPlaintext), ("SCRAM-SHA-256", SASLScram256), ("SCRAM-SHA-512", SASLScram512)],
)
def test_sasl_ssl_maps_to_faststream_and_aiokafka(mechanism: str, kind: type[BaseSecurity]) -> None:
    k = kafka(security_protocol="SASL_SSL", sasl_mechanism=mechanism, sasl_username="svc", sasl_password="pw")
    security = broker_security(k)
    assert type(security) is kind and security.use_ssl
    assert isinstance(security.ssl_context, ssl.SSLContext)
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED and security.ssl_context.check_hostname
    options = client_options(k)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == mechanism
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("svc", "pw")
    assert options["bootstrap_servers"] == "k1:9093,k2:9093"


def test_sasl_plaintext_has_no_tls() -> None:
    k = kafka(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p")
    options = client_options(k)
    assert options["security_protocol"] == "SASL_PLAINTEXT" and options["ssl_context"] is None


def test_tls_only_with_a_ca_file_and_no_hostname_check(tmp_path: Path) -> None:
    ca = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    if not ca.is_file():
        pytest.skip("no system CA bundle to load")
    k = kafka(security_protocol="SSL", ssl_cafile=str(ca), ssl_check_hostname=False)
    options = client_options(k)
    assert options["security_protocol"] == "SSL"
    assert options["ssl_context"].check_hostname is False
    assert "sasl_mechanism" not in options
    with pytest.raises((FileNotFoundError, ssl.SSLError)):
        ssl_context(kafka(security_protocol="SSL", ssl_cafile=str(tmp_path / "missing.pem")))


def test_sasl_without_credentials_is_refused_with_the_variables_named() -> None:
    with pytest.raises(ValidationError, match="EVIDENTIA_KAFKA_SASL_USERNAME"):
        kafka(security_protocol="SASL_SSL")
    with pytest.raises(ValidationError, match="SSL_CERTFILE"):
        kafka(security_protocol="SSL", ssl_keyfile="/x.key")


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVIDENTIA_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("EVIDENTIA_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("EVIDENTIA_KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("EVIDENTIA_KAFKA_SASL_PASSWORD", "from-env")
    k = KafkaSettings()
    assert isinstance(k.sasl_password, SecretStr) and "from-env" not in repr(k)
    assert client_options(k)["sasl_plain_password"] == "from-env"


def test_the_settings_dump_masks_every_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVIDENTIA_DATABASE_URL", "postgresql://evidentia:db-pw@db.internal:5432/evidentia")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-xyz")
    monkeypatch.setenv("EVIDENTIA_TRACING_OTLP_HEADERS", "x-api-key=otlp-secret")
    settings = Settings(kafka=kafka(security_protocol="SASL_SSL", sasl_username="svc", sasl_password="kafka-pw"))
    assert settings.database.url.endswith("@db.internal:5432/evidentia")
    dump = settings.public_dump()
    text = str(dump)
    for secret in ("kafka-pw", "db-pw", "sk-ant-xyz", "otlp-secret"):
        assert secret not in text
    assert dump["database"]["url"] == "postgresql://evidentia:***@db.internal:5432/evidentia"
    assert dump["kafka"]["sasl_username"] == "svc"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:p@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p%40x@[::1]:5433/db?sslmode=require", "postgresql://u:***@[::1]:5433/db?sslmode=require"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("not a url", "not a url"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
