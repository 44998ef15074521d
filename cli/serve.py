"""``evidentia serve``: run the six services as local processes (foreground, or ``--detach``/``--stop``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="Run every service (or some) as local processes.")
    p.add_argument("services", nargs="*", help="Services to run (default: all six).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--detach", action="store_true", help="Start in the background and return once ready.")
    g.add_argument("--stop", action="store_true", help="Stop services started with --detach.")
    p.set_defaults(func=run)


def _run_dir() -> Path:
    from devstack.common import default_root

    return default_root() / "run"


def run(args: argparse.Namespace) -> int:
    from devstack.common import default_root, pid_alive
    from devstack.processes import SERVICES, ServiceStack

    names = args.services or list(SERVICES)
    run_dir = _run_dir()
    as_json = bool(getattr(args, "json", False))
    if args.stop:
        stopped: dict[str, int] = {}
        for pid_file in sorted(run_dir.glob("*.pid")):
            pid = int(pid_file.read_text())
            if pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
                stopped[pid_file.stem] = pid
                if not as_json:
                    print(f"stopped {pid_file.stem} (pid {pid})")
            pid_file.unlink()
        if as_json:
            print(json.dumps({"stopped": stopped}))
        return 0
    stack = ServiceStack(log_dir=default_root() / "logs", env=dict(os.environ), services=names)
    stack.start(timeout=300)
    if args.detach:
        run_dir.mkdir(parents=True, exist_ok=True)
        for name, proc in stack.processes.items():
            assert proc.proc is not None
            (run_dir / f"{name}.pid").write_text(str(proc.proc.pid))
        if as_json:
            pids = {name: proc.proc.pid for name, proc in stack.processes.items() if proc.proc is not None}
            print(json.dumps({"running": pids, "logs": str(default_root() / "logs")}))
        else:
            logs = default_root() / "logs"
            print(f"running: {', '.join(names)} (logs in {logs}); stop with `evidentia serve --stop`")
        return 0
    print(f"running: {', '.join(names)}; Ctrl-C stops them")
    try:
        while all(p.alive() for p in stack.processes.values()):
            time.sleep(1)
        dead = [n for n, p in stack.processes.items() if not p.alive()]
        print(f"service exited: {dead}")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()
