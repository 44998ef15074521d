"""Run Evidentia's services as separate local processes (``make demo``, ``make up``, integration tests).

Each service runs as ``python -m services.<name>`` with its own log file; :class:`ServiceStack`
starts them, waits until each answers its readiness probe, and stops them (SIGTERM, then SIGKILL).
``kill(name)`` sends SIGKILL to one service, for the fault tests and the soak.

Ports belong to services (``shared.registry``), not to their position in the list started: starting
any subset gives each service its own port. A port already in use is refused before the service
starts (otherwise another process's readiness probe would answer for it), and a service that exits
while starting fails the start with its last log lines.
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

from devstack.common import port_accepts
from shared.registry import DEFAULT_PORTS, SERVICES

__all__ = ["SERVICES", "ServiceProcess", "ServiceStack", "ServiceStartError"]


class ServiceStartError(RuntimeError):
    """Some services did not start: ``failed`` maps each to what went wrong (with its last log lines)."""

    def __init__(self, failed: Mapping[str, str]) -> None:
        self.failed = dict(failed)
        super().__init__("\n".join(f"service {name}: {why}" for name, why in self.failed.items()))


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

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

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
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self) -> None:
        """SIGTERM (a clean shutdown), without waiting for it: :meth:`wait_stopped` waits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float = 15.0) -> None:
        """Wait for the process to exit after :meth:`terminate`; SIGKILL past ``timeout``."""
        if self.proc is None:
            return
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
    """Some or all of the six services, configured by environment variables (``EVIDENTIA_*``).

    ``ports`` overrides the registry's port of a service (tests use free ports); ``gateway_port``
    overrides the gateway's alone (``EVIDENTIA_GATEWAY_PORT`` of ``evidentia demo``). ``instance`` (e.g.
    ``r2`` for a second replica) gives each process the static Kafka group membership id
    ``<instance>-<service>`` (``EVIDENTIA_KAFKA_GROUP_INSTANCE_ID``), kept across its restarts; two stacks
    on one Kafka must use different ones.
    """

    log_dir: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    gateway_port: int | None = None
    services: Sequence[str] = SERVICES
    ports: Mapping[str, int] = field(default_factory=dict)
    processes: dict[str, ServiceProcess] = field(default_factory=dict)
    instance: str | None = None

    def __post_init__(self) -> None:
        unknown = [n for n in self.services if n not in DEFAULT_PORTS]
        if unknown:
            raise ValueError(f"unknown services {unknown}; known: {', '.join(SERVICES)}")
        by_port: dict[int, list[str]] = {}
        for name in self.services:
            by_port.setdefault(self.port_of(name), []).append(name)
        shared = {port: names for port, names in by_port.items() if len(names) > 1}
        if shared:  # one would fail to bind, and the other would answer its readiness probe for it
            raise ValueError(f"services share a port: {shared}")
        for name in self.services:
            env = dict(self.env)
            port = self.port_of(name)
            if name == "gateway":
                env["EVIDENTIA_GATEWAY_PORT"] = str(port)
                env["EVIDENTIA_GATEWAY_URL"] = f"http://127.0.0.1:{port}"
            else:
                env["EVIDENTIA_METRICS_PORT"] = str(port)
            if self.instance:
                env["EVIDENTIA_KAFKA_GROUP_INSTANCE_ID"] = f"{self.instance}-{name}"
            env.setdefault("PYTHONUNBUFFERED", "1")
            env.setdefault("HF_HUB_OFFLINE", "1")
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            self.processes[name] = ServiceProcess(name, port, self.log_dir / f"{name}.log", env)

    def port_of(self, name: str) -> int:
        if name in self.ports:
            return self.ports[name]
        if name == "gateway" and self.gateway_port is not None:
            return self.gateway_port
        return DEFAULT_PORTS[name]

    def start(self, timeout: float = 180.0, names: Sequence[str] | None = None) -> None:
        """Start ``names`` (default: all) and wait until each is ready.

        Raises :class:`ServiceStartError` naming every service whose port was taken, that exited
        while starting or that was not ready in time; the others are left running.
        """
        chosen = [self.processes[n] for n in (names or self.services)]
        failed: dict[str, str] = {}
        for p in chosen:
            if port_accepts("127.0.0.1", p.port):
                failed[p.name] = f"port {p.port} is already in use (is {p.name} already running?)"
        for p in chosen:
            if p.name not in failed:
                p.start()
        try:
            self.wait_ready(timeout, [p.name for p in chosen if p.name not in failed])
        except ServiceStartError as e:
            failed.update(e.failed)
        if failed:
            raise ServiceStartError(failed)

    def wait_ready(self, timeout: float = 180.0, names: Sequence[str] | None = None) -> None:
        pending = {n: self.processes[n] for n in (names if names is not None else self.services)}
        failed: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for name, p in list(pending.items()):
                if not p.alive():
                    code = p.proc.returncode if p.proc is not None else None
                    failed[name] = f"exited during start-up (exit code {code}); last log lines:\n{p.tail()}"
                    del pending[name]
                elif p.ready():
                    del pending[name]
            if pending:
                time.sleep(0.5)
        for name, p in pending.items():
            failed[name] = f"not ready after {timeout:.0f}s; last log lines:\n{p.tail()}"
        # Ready, then gone (it lost a race for its port, or crashed right after the probe).
        for name in names if names is not None else self.services:
            if name not in failed and not self.processes[name].alive():
                failed[name] = f"exited right after start-up; last log lines:\n{self.processes[name].tail()}"
        if failed:
            raise ServiceStartError(failed)

    def restart(self, *names: str, timeout: float = 120.0) -> None:
        """Stop ``names`` (all told at once, each waited for), then start them together and wait until each is
        ready: restarting two services costs about as long as the slower one."""
        chosen = [self.processes[n] for n in names]
        for p in chosen:
            p.terminate()
        for p in chosen:
            p.wait_stopped()
        self.start(timeout, list(names))

    def stop(self) -> None:
        for name in reversed(self.services):
            self.processes[name].stop()

    def __enter__(self) -> ServiceStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
