"""The gateway refuses to serve /v1 without authentication beyond this host, unless told to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.gateway.security import ExposureRefused, check_exposure, is_loopback
from shared.settings import GatewaySettings

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "192.168.1.2", "gateway.example.org", ""])
def test_other_addresses(host: str) -> None:
    assert not is_loopback(host)


def test_open_gateway_only_on_loopback_or_when_explicit() -> None:
    anonymous = GatewaySettings(api_key_hashes="")  # type: ignore[call-arg]
    check_exposure("127.0.0.1", anonymous)
    with pytest.raises(ExposureRefused, match="EVIDENTIA_GATEWAY_API_KEY_HASHES"):
        check_exposure("0.0.0.0", anonymous)
    check_exposure("0.0.0.0", GatewaySettings(api_key_hashes="ab" * 32))  # type: ignore[call-arg]
    check_exposure("0.0.0.0", GatewaySettings(allow_anonymous=True))  # type: ignore[call-arg]


def run_gateway(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EVIDENTIA_")}
    base.update({"PYTHONPATH": str(REPO), "EVIDENTIA_GATEWAY_PORT": "1", **env})
    return subprocess.run(
        [sys.executable, "-m", "services.gateway"], env=base, cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_the_gateway_process_refuses_to_start_open_on_all_interfaces() -> None:
    result = run_gateway({"EVIDENTIA_GATEWAY_HOST": "0.0.0.0"})
    assert result.returncode == 78, result.stderr[-2000:]
    assert "refusing to listen on 0.0.0.0 with authentication off" in result.stderr
    assert "EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS" in result.stderr
