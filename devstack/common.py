"""Helpers shared by the local Kafka and PostgreSQL launchers."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import psutil

#: Environment variable that moves the whole dev stack's data (default ``<repo>/.data``).
DEVSTACK_DIR_ENV = "EVIDENTIA_DEVSTACK_DIR"


class DevstackError(RuntimeError):
    """A dev-stack component could not be prepared, started or stopped; the message says why."""


def repo_root() -> Path:
    """The repository checkout this package lives in (``devstack`` is one level down)."""
    return Path(__file__).resolve().parents[1]


def default_root() -> Path:
    """Where the dev stack keeps its data: ``$EVIDENTIA_DEVSTACK_DIR`` or ``<repo>/.data``."""
    override = os.environ.get(DEVSTACK_DIR_ENV)
    return Path(override).expanduser().resolve() if override else repo_root() / ".data"


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a live process (zombies count as dead)."""
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def pid_exists(pid: int) -> bool:
    """True when ``pid`` exists at all, zombies included."""
    return pid > 0 and bool(psutil.pid_exists(pid))


def pid_cmdline(pid: int) -> list[str]:
    """The command line of ``pid``, or an empty list when it cannot be read."""
    try:
        return [str(part) for part in psutil.Process(pid).cmdline()]
    except psutil.Error:
        return []


def read_pid(path: Path) -> int | None:
    """The integer on the first line of a pid file, or None when the file is missing or garbage."""
    try:
        return int(path.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


#: Every port :func:`free_ports` has handed out in this process: never handed out again.
_HANDED_OUT: set[int] = set()
_HANDING_OUT = threading.Lock()

#: Sockets opened while looking for ports not handed out before, at most (a range of ~28,000 ports).
_MAX_TRIES = 10_000


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (all held open together while they are chosen), none
    that this process handed out before. A port chosen is released for its user to bind later; until then the
    kernel may give it to the next caller again, so two separate calls could return the same port (two services
    of a test stack once did: the second could not bind it, and its readiness probe was answered by the first)."""
    sockets: list[socket.socket] = []
    chosen: list[int] = []
    with _HANDING_OUT:
        try:
            while len(chosen) < count:
                if len(sockets) >= count + _MAX_TRIES:
                    raise DevstackError(f"no {count} free ports left on 127.0.0.1 that this process has not used")
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind(("127.0.0.1", 0))
                sockets.append(sock)  # held open, even when refused: the kernel then gives another
                port = int(sock.getsockname()[1])
                if port not in _HANDED_OUT and port not in chosen:
                    chosen.append(port)
            _HANDED_OUT.update(chosen)
            return chosen
        finally:
            for sock in sockets:
                sock.close()


def free_port() -> int:
    """One TCP port free on 127.0.0.1 now, never one this process handed out before (:func:`free_ports`)."""
    return free_ports(1)[0]
