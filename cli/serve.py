"""``evidentia serve``: run the six services as local processes (foreground, ``--detach``, ``--restart``, ``--stop``).

Detached services are recorded in ``<devstack dir>/run/<service>.pid``; their logs go to
``<devstack dir>/logs/<service>.log``. Each service keeps its own port (``shared.registry``) whatever
subset is started. A service that cannot start (port taken, exit during start-up, not ready in time)
makes the command exit non-zero with that service's last log lines; the ones that did start keep
running and are recorded.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

STOP_TIMEOUT_S = 20.0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="Run every service (or some) as local processes.")
    p.add_argument("services", nargs="*", help="Services to run (default: all six).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--detach", action="store_true", help="Start in the background and return once ready.")
    g.add_argument(
        "--restart",
        metavar="NAME",
        action="append",
        default=[],
        help="Stop the detached service NAME (if it runs) and start it again; may be repeated.",
    )
    g.add_argument("--stop", action="store_true", help="Stop services started with --detach (or only those named).")
    p.add_argument("--timeout", type=float, default=300.0, help="Seconds to wait for each start (default 300).")
    p.set_defaults(func=run)


def _run_dir() -> Path:
    from devstack.common import default_root

    return default_root() / "run"


def _running_pid(name: str) -> int | None:
    from devstack.common import pid_alive, read_pid

    pid = read_pid(_run_dir() / f"{name}.pid")
    return pid if pid is not None and pid_alive(pid) else None


def _stop(name: str) -> None:
    """SIGTERM the detached service ``name`` and wait for it (SIGKILL after STOP_TIMEOUT_S)."""
    from devstack.common import pid_alive

    pid_file = _run_dir() / f"{name}.pid"
    pid = _running_pid(name)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        print(f"stopped {name} (pid {pid})")
    pid_file.unlink(missing_ok=True)


def _start_detached(names: list[str], timeout: float) -> int:
    from devstack.common import default_root
    from devstack.processes import ServiceStack, ServiceStartError

    run_dir = _run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    already = {n: pid for n in names if (pid := _running_pid(n)) is not None}
    for name, pid in already.items():
        print(f"{name} is already running (pid {pid}); `evidentia serve --restart {name}` restarts it")
    todo = [n for n in names if n not in already]
    if not todo:
        return 0
    stack = ServiceStack(log_dir=default_root() / "logs", env=dict(os.environ), services=todo)
    failed: dict[str, str] = {}
    try:
        stack.start(timeout=timeout)
    except ServiceStartError as e:
        failed = e.failed
    started = [n for n in todo if n not in failed and stack.processes[n].alive()]
    for name in started:
        pid = stack.processes[name].pid
        (run_dir / f"{name}.pid").write_text(f"{pid}\n")
    if started:
        print(f"running: {', '.join(started)} (logs in {default_root() / 'logs'}); stop with `evidentia serve --stop`")
    for name, why in failed.items():
        stack.processes[name].kill()  # one that was merely slow must not linger unrecorded
        print(f"error: {name} did not start: {why}", file=sys.stderr)
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    from devstack.common import default_root
    from devstack.processes import ServiceStack, ServiceStartError
    from shared.registry import SERVICES

    unknown = [n for n in [*args.services, *args.restart] if n not in SERVICES]
    if unknown:
        print(f"error: unknown services {unknown}; known: {', '.join(SERVICES)}", file=sys.stderr)
        return 2
    names = args.services or list(SERVICES)
    if args.stop:
        stop = args.services or sorted(p.stem for p in _run_dir().glob("*.pid"))
        for name in stop:
            _stop(name)
        return 0
    if args.restart:
        for name in args.restart:
            _stop(name)
        return _start_detached(list(args.restart), args.timeout)
    if args.detach:
        return _start_detached(names, args.timeout)
    stack = ServiceStack(log_dir=default_root() / "logs", env=dict(os.environ), services=names)
    try:
        stack.start(timeout=args.timeout)
    except ServiceStartError as e:
        stack.stop()
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"running: {', '.join(names)}; Ctrl-C stops them")
    try:
        while all(p.alive() for p in stack.processes.values()):
            time.sleep(1)
        dead = [n for n, p in stack.processes.items() if not p.alive()]
        print(f"service exited: {dead}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()
