"""Extra gateway processes next to the session stack, each with its own settings (timeouts, guards)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from devstack.common import free_port
from devstack.processes import ServiceProcess
from tests.integration.conftest import Stack


@contextmanager
def extra_gateway(stack: Stack, name: str, env: dict[str, str], timeout: float = 120.0) -> Iterator[str]:
    """A second gateway on the stack's Kafka and PostgreSQL with ``env`` on top; yields its base URL."""
    port = free_port()
    merged = dict(stack.services.processes["gateway"].env)
    merged.update(env)
    merged.update({"EVIDENTIA_GATEWAY_PORT": str(port), "EVIDENTIA_GATEWAY_URL": f"http://127.0.0.1:{port}"})
    gateway = ServiceProcess("gateway", port, stack.infra.root / "logs" / f"gateway-{name}.log", merged)
    gateway.start()
    try:
        deadline = time.monotonic() + timeout
        while not gateway.ready():
            if not gateway.alive():
                raise RuntimeError(f"gateway {name} exited:\n{gateway.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateway {name} not ready after {timeout:.0f}s:\n{gateway.tail()}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        gateway.stop()


def gateway_counter(base: str, name: str, *labels: str) -> float:
    """The sum of a gateway Prometheus counter over the series whose line carries every label given."""
    total = 0.0
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        if line.startswith(name) and all(label in line for label in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total
