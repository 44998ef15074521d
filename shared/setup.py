"""``python -m shared.setup [migrate] [topics]``: the one-shot set-up every deployment runs before the services.

Applies the numbered SQL migrations (under an advisory lock) and creates the Kafka topics with their partitions
and retention; both steps are idempotent. It needs only the runtime library, so it runs from any service image:
the compose file's ``init`` service, the Kubernetes set-up Jobs and the Helm chart's pre-install hook. Retries
until Kafka and PostgreSQL answer (``--wait`` seconds), so it can start alongside them. With no step named,
both run. Exit status 0 when done, 1 when a step still failed after the wait.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable

from shared.settings import Settings, get_settings

log = logging.getLogger("evidentia.setup")
STEPS = ("migrate", "topics")


async def _migrate(settings: Settings) -> str:
    from shared.db import migrate

    applied = await migrate(settings.database.url)
    return f"applied migrations {applied}" if applied else "database is up to date"


async def _topics(settings: Settings) -> str:
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    k = settings.kafka
    created = await ensure_topics(k.bootstrap, standard_topics(k.topic_partitions), k.replication_factor)
    return f"created topics {created}" if created else "every topic exists"


async def run_step(name: str, step: Callable[[], Awaitable[str]], wait_s: float, pause_s: float = 2.0) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            print(f"{name}: {await step()}", flush=True)
            return True
        except Exception as exc:  # not reachable yet, or failing: try again until the deadline
            if time.monotonic() + pause_s > deadline:
                print(f"{name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                return False
            print(f"{name}: not ready ({type(exc).__name__}: {exc}); retrying", file=sys.stderr, flush=True)
            await asyncio.sleep(pause_s)


async def setup(steps: list[str], wait_s: float) -> bool:
    settings = get_settings()
    actions = {"migrate": lambda: _migrate(settings), "topics": lambda: _topics(settings)}
    for name in steps:
        if not await run_step(name, actions[name], wait_s):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m shared.setup", description="Apply the database migrations and create the Kafka topics."
    )
    p.add_argument("steps", nargs="*", metavar="STEP", help="migrate, topics (default: both, in that order)")
    p.add_argument("--wait", type=float, default=300.0, help="Seconds to keep retrying an unreachable service.")
    args = p.parse_args(argv)
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown:
        p.error(f"unknown step(s) {unknown}: choose from {list(STEPS)}")
    return 0 if asyncio.run(setup(list(args.steps) or list(STEPS), args.wait)) else 1


if __name__ == "__main__":
    sys.exit(main())
