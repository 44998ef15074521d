"""A worker service's /metrics, /healthz and /readyz listen where EVIDENTIA_PROBE_HOST says (loopback by default)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from shared import service
from shared.settings import ServiceSettings, Settings


class FakeServer:
    configs: ClassVar[list[Any]] = []

    def __init__(self, config: Any) -> None:
        FakeServer.configs.append(config)

    async def serve(self) -> None:
        return None


@pytest.mark.parametrize(("env", "host"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0"), ("10.1.2.3", "10.1.2.3")])
def test_run_app_binds_the_probe_host(monkeypatch: pytest.MonkeyPatch, env: str | None, host: str) -> None:
    if env is None:
        monkeypatch.delenv("EVIDENTIA_PROBE_HOST", raising=False)
    else:
        monkeypatch.setenv("EVIDENTIA_PROBE_HOST", env)
    settings = Settings(service=ServiceSettings())  # type: ignore[call-arg]
    monkeypatch.setattr(service, "get_settings", lambda: settings)
    monkeypatch.setattr(service, "configure_logging", lambda *a: None)
    monkeypatch.setattr(service.uvicorn, "Server", FakeServer)
    FakeServer.configs.clear()
    service.run_app("retriever", object())  # type: ignore[arg-type]
    (config,) = FakeServer.configs
    assert (config.host, config.port) == (host, service.DEFAULT_PORTS["retriever"])
