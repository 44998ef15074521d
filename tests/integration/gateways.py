"""Extra gateway processes next to the session stack, each with its own settings (timeouts, guards)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from devstack.common import free_port
from devstack.processes import ServiceProcess
from tests.integration.conftest import Infra, Stack


@contextmanager
def extra_gateway(stack: Stack, name: str, env: dict[str, str], timeout: float = 120.0) -> Iterator[str]:
    """A second gateway on the stack's Kafka and PostgreSQL with ``env`` on top; yields its base URL."""
    merged = dict(stack.services.processes["gateway"].env)
    merged.update(env)
    with _gateway(stack.infra.root / "logs", name, merged, timeout) as (url, _):
        yield url


@contextmanager
def infra_gateway(infra: Infra, name: str, env: dict[str, str], timeout: float = 120.0) -> Iterator[str]:
    """A gateway on the session's Kafka and PostgreSQL alone (no other service), ``env`` on top; its base URL."""
    with infra_gateway_process(infra, name, env, timeout) as (url, _):
        yield url


@contextmanager
def infra_gateway_process(
    infra: Infra, name: str, env: dict[str, str], timeout: float = 120.0
) -> Iterator[tuple[str, ServiceProcess]]:
    """:func:`infra_gateway`, with its process (to kill it)."""
    merged = dict(os.environ) | infra.env | {"EVIDENTIA_KAFKA_TOPIC_PARTITIONS": "3"} | env
    with _gateway(infra.root / "logs", name, merged, timeout) as started:
        yield started


@contextmanager
def _gateway(log_dir: Path, name: str, env: dict[str, str], timeout: float) -> Iterator[tuple[str, ServiceProcess]]:
    port = free_port()
    merged = env | {"EVIDENTIA_GATEWAY_PORT": str(port), "EVIDENTIA_GATEWAY_URL": f"http://127.0.0.1:{port}"}
    gateway = ServiceProcess("gateway", port, log_dir / f"gateway-{name}.log", merged)
    gateway.start()
    try:
        deadline = time.monotonic() + timeout
        while not gateway.ready():
            if not gateway.alive():
                raise RuntimeError(f"gateway {name} exited:\n{gateway.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateway {name} not ready after {timeout:.0f}s:\n{gateway.tail()}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", gateway
    finally:
        gateway.stop()


def gateway_counter(base: str, name: str, *labels: str) -> float:
    """The sum of a gateway Prometheus counter over the series whose line carries every label given."""
    total = 0.0
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        if line.startswith(name) and all(label in line for label in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total
