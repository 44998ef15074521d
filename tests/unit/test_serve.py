"""The local supervisor: ports by service, loud start failures, ``evidentia serve --restart``.

The services here never get a broker: a bad setting makes them exit at import, a taken port is
refused before they start. Their real start/restart under load is exercised by the integration
stack and ``make soak``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.common import pid_alive
from devstack.processes import ServiceStack
from docgen.contracts import SERVICES as CONTRACT_SERVICES
from shared.registry import DEFAULT_PORTS, EVENT_SERVICES, SERVICE_SPECS, SERVICES, spec
from shared.service import DEFAULT_PORTS as SERVICE_DEFAULT_PORTS

REPO = Path(__file__).resolve().parents[2]


def test_every_service_has_its_own_port_and_module() -> None:
    ports = [s.port for s in SERVICE_SPECS]
    assert len(set(ports)) == len(ports) == len(SERVICES) == 6
    for s in SERVICE_SPECS:
        assert (REPO / "services" / s.name / "__main__.py").is_file()
    assert SERVICE_DEFAULT_PORTS is DEFAULT_PORTS  # the services read the same list
    assert set(CONTRACT_SERVICES) == set(EVENT_SERVICES) == set(SERVICES) - {"gateway"}
    assert spec("retriever").consumes and "chunks.embedded" in spec("retriever").consumes
    with pytest.raises(KeyError, match="known"):
        spec("indexer")


@pytest.mark.parametrize(
    "subset",
    [("embedder", "parser", "retriever"), ("retriever",), ("gateway", "fetcher"), SERVICES],
)
def test_a_service_keeps_its_port_whatever_subset_is_started(tmp_path: Path, subset: tuple[str, ...]) -> None:
    stack = ServiceStack(log_dir=tmp_path, env={}, services=subset)
    for name in subset:
        p = stack.processes[name]
        assert p.port == DEFAULT_PORTS[name]
        key = "EVIDENTIA_GATEWAY_PORT" if name == "gateway" else "EVIDENTIA_METRICS_PORT"
        assert p.env[key] == str(DEFAULT_PORTS[name])


def test_unknown_service_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown services"):
        ServiceStack(log_dir=tmp_path, env={}, services=("fetcher", "indexer"))


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "EVIDENTIA_DEVSTACK_DIR": str(tmp_path), "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", *args, "--timeout", "60"],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_detach_fails_loudly_when_a_service_exits_during_start(tmp_path: Path) -> None:
    # A setting out of range makes the parser exit at import, as a real misconfiguration would.
    r = _serve(tmp_path, "--detach", "parser", EVIDENTIA_KAFKA_TOPIC_PARTITIONS="0")
    assert r.returncode == 1
    assert "parser did not start: exited during start-up" in r.stderr
    assert "topic_partitions" in r.stderr  # the service's own last log lines
    assert "running:" not in r.stdout
    assert not (tmp_path / "run" / "parser.pid").exists()


@pytest.fixture
def occupied_embedder_port() -> Iterator[int]:
    port = DEFAULT_PORTS["embedder"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        pytest.skip(f"port {port} is in use on this machine")
    sock.listen(8)
    try:
        yield port
    finally:
        sock.close()


def test_detach_refuses_a_port_in_use_instead_of_trusting_another_process_probe(
    tmp_path: Path, occupied_embedder_port: int
) -> None:
    r = _serve(tmp_path, "--detach", "embedder")
    assert r.returncode == 1
    assert f"port {occupied_embedder_port} is already in use" in r.stderr
    assert not (tmp_path / "run" / "embedder.pid").exists()


def test_restart_stops_the_recorded_process_then_starts_and_reports(tmp_path: Path) -> None:
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "parser.pid").write_text(f"{old.pid}\n")
        r = _serve(tmp_path, "--restart", "parser", EVIDENTIA_KAFKA_TOPIC_PARTITIONS="0")
        old.wait(10)  # reaped: the restart stopped it
        assert not pid_alive(old.pid)
        assert f"stopped parser (pid {old.pid})" in r.stdout
        # ... and tried to start it again, which fails loudly here (bad setting)
        assert r.returncode == 1
        assert "parser did not start" in r.stderr
    finally:
        if old.poll() is None:
            old.kill()


def test_detach_skips_a_service_already_running(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "synthesizer.pid").write_text(f"{os.getpid()}\n")
    t0 = time.monotonic()
    r = _serve(tmp_path, "--detach", "synthesizer")
    assert r.returncode == 0
    assert "synthesizer is already running" in r.stdout
    assert time.monotonic() - t0 < 30


def test_unknown_service_names_exit_2(tmp_path: Path) -> None:
    r = _serve(tmp_path, "--restart", "indexer")
    assert r.returncode == 2
    assert "unknown services ['indexer']" in r.stderr
