"""Run Evidentia's services as separate local processes (``make demo``, ``make up``, integration tests).

Each service runs as ``python -m services.<name>`` with its own log file; :class:`ServiceStack`
starts them, waits until each answers its readiness probe, and stops them (SIGTERM, then SIGKILL).
``kill(name)`` sends SIGKILL to one service, for the fault tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

SERVICES: tuple[str, ...] = ("fetcher", "parser", "embedder", "retriever", "synthesizer", "gateway")


@dataclass
class ServiceProcess:
    name: str
    port: int
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/readyz"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{self.name}"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        try:
            return httpx.get(self.ready_url, timeout=2.0).status_code in (200, 204)
        except httpx.HTTPError:
            return False

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no final commit (fault tests)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ServiceStack:
    """The six services, configured by environment variables (``EVIDENTIA_*``)."""

    log_dir: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    base_port: int = 9101
    gateway_port: int = 8000
    services: Sequence[str] = SERVICES
    ports: Mapping[str, int] = field(default_factory=dict)
    processes: dict[str, ServiceProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, name in enumerate(self.services):
            env = dict(self.env)
            if name == "gateway":
                port = self.ports.get(name, self.gateway_port)
                env["EVIDENTIA_GATEWAY_PORT"] = str(port)
                env["EVIDENTIA_GATEWAY_URL"] = f"http://127.0.0.1:{port}"
            else:
                port = self.ports.get(name, self.base_port + i)
                env["EVIDENTIA_METRICS_PORT"] = str(port)
            env.setdefault("PYTHONUNBUFFERED", "1")
            env.setdefault("HF_HUB_OFFLINE", "1")
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            self.processes[name] = ServiceProcess(name, port, self.log_dir / f"{name}.log", env)

    def start(self, timeout: float = 180.0, names: Sequence[str] | None = None) -> None:
        chosen = [self.processes[n] for n in (names or self.services)]
        for p in chosen:
            p.start()
        self.wait_ready(timeout, [p.name for p in chosen])

    def wait_ready(self, timeout: float = 180.0, names: Sequence[str] | None = None) -> None:
        pending = {n: self.processes[n] for n in (names or self.services)}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for name, p in list(pending.items()):
                if not p.alive():
                    raise RuntimeError(f"service {name} exited during start-up:\n{p.tail()}")
                if p.ready():
                    del pending[name]
            time.sleep(0.5)
        if pending:
            details = "\n".join(f"--- {n}:\n{p.tail()}" for n, p in pending.items())
            raise TimeoutError(f"services not ready after {timeout:.0f}s: {sorted(pending)}\n{details}")

    def restart(self, name: str, timeout: float = 120.0) -> None:
        p = self.processes[name]
        p.stop()
        p.start()
        self.wait_ready(timeout, [name])

    def stop(self) -> None:
        for name in reversed(self.services):
            self.processes[name].stop()

    def __enter__(self) -> ServiceStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
