"""Helpers shared by sub-commands: a one-shot Kafka producer, job progress, JSON output."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from faststream.kafka import KafkaBroker
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli import exits
from cli.gateway import Backoff, GatewayError
from shared.db.jobs import PROGRESS, JobStatus
from shared.events import Event
from shared.kafka.security import broker_security
from shared.settings import Settings

console = Console(stderr=True)
out = Console()


@asynccontextmanager
async def producer(settings: Settings) -> AsyncIterator[KafkaBroker]:
    """A bare broker used only to publish (no consumers, no middlewares)."""
    broker = KafkaBroker(
        settings.kafka.bootstrap,
        security=broker_security(settings.kafka),
        client_id=f"{settings.kafka.client_id}-cli",
        max_request_size=settings.kafka.max_request_size,
    )
    await broker.connect()
    try:
        yield broker
    finally:
        await broker.stop()


async def publish_all(
    broker: KafkaBroker,
    topic_of: dict[type[Event] | type[bytes], str],
    events: Iterable[tuple[Event | bytes, str]],
    window: int = 256,
) -> int:
    """Publish ``(event, key)`` pairs (an event, or its bytes framed already, as ``ChunkCreated`` version 2),
    each to the topic of its type, ``window`` in flight at a time; returns the count."""
    pending: list[asyncio.Future[object]] = []
    n = 0
    for event, key in events:
        topic = topic_of[type(event)]
        pending.append(asyncio.ensure_future(broker.publish(event, topic=topic, key=key.encode())))
        n += 1
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    return n


STAGE_ORDER = PROGRESS


def job_progress(status: JobStatus) -> tuple[object, ...]:
    """What changes while a job makes progress (polling backs off while it stays the same)."""
    return (status.state, status.done, tuple(sorted(status.counts.items())), len(status.failures))


async def follow_job(
    fetch: Callable[[], Awaitable[JobStatus | None]],
    job_id: str,
    timeout: float,
    backoff: Backoff | None = None,
    show: bool = True,
    throttled: Callable[[], bool] | None = None,
) -> JobStatus:
    """Show one progress bar per stage until the job is done (or ``timeout``); return the last status.

    Polls at ``backoff``'s pace: from its initial interval, growing while nothing changes, back to the
    initial one as soon as the job moves, unless ``throttled()`` says the last read was rate limited."""
    backoff = backoff or Backoff(initial=0.5, factor=1.5, maximum=5.0)
    deadline = time.monotonic() + timeout
    last: tuple[object, ...] | None = None
    with Progress(
        TextColumn("{task.description:>10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show,
        transient=False,
    ) as progress:
        tasks = {s: progress.add_task(s, total=None) for s in STAGE_ORDER}
        while True:
            status = await fetch()
            if status is None:
                raise GatewayError(f"no ingestion job {job_id}", exits.NOINPUT)
            for s in STAGE_ORDER:
                progress.update(tasks[s], total=status.total or None, completed=status.reached(s))
            if status.done or status.state == "failed" or time.monotonic() > deadline:
                return status
            now = job_progress(status)
            if now != last and not (throttled and throttled()):
                backoff.reset()
            last = now
            await asyncio.sleep(min(backoff.next(), max(0.0, deadline - time.monotonic())))


def print_summary(status: JobStatus) -> None:
    out.print(
        f"job {status.job_id}: {status.total} documents, state {status.state}"
        + (f" ({status.error})" if status.error else "")
    )
    out.print("  " + ", ".join(f"{k} {v}" for k, v in status.counts.items() if v))
    for f in status.failures[:20]:
        out.print(f"  [red]failed[/red] {f.document_id}: {f.error}")
    if len(status.failures) > 20:
        out.print(f"  ... and {len(status.failures) - 20} more failures")


def print_json(data: Any) -> None:
    """One JSON document on stdout (``--json``)."""
    print(json.dumps(data, indent=2, default=str))


def wants_json(args: Any) -> bool:
    return bool(getattr(args, "json", False))
