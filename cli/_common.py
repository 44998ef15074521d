"""Helpers shared by sub-commands: a one-shot Kafka producer, the gateway client, job progress."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from faststream.kafka import KafkaBroker
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shared.db.jobs import PROGRESS, JobStatus
from shared.events import Event
from shared.kafka_security import broker_security
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
    broker: KafkaBroker, topic_of: dict[type[Event], str], events: Iterable[tuple[Event, str]], window: int = 256
) -> int:
    """Publish ``(event, key)`` pairs, ``window`` in flight at a time; returns the count."""
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


def gateway_client(settings: Settings, timeout: float = 120.0) -> httpx.Client:
    return httpx.Client(base_url=settings.service.gateway_url, timeout=timeout)


def post_gateway(settings: Settings, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """POST ``body`` to the running gateway: its JSON answer, or None (the error printed) unless it is a 200."""
    with gateway_client(settings) as http:
        r = http.post(path, json=body)
    if r.status_code != 200:
        console.print(f"[red]{r.status_code}[/red] {r.text}")
        return None
    data: dict[str, Any] = r.json()
    return data


STAGE_ORDER = PROGRESS


async def follow_job(
    fetch: Callable[[], Awaitable[JobStatus | None]],
    job_id: str,
    timeout: float,
    poll_s: float = 0.5,
    show: bool = True,
) -> JobStatus:
    """Show one progress bar per stage until the job is done (or ``timeout``); return the last status."""
    deadline = time.monotonic() + timeout
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
                raise SystemExit(f"no ingestion job {job_id}")
            for s in STAGE_ORDER:
                progress.update(tasks[s], total=status.total or None, completed=status.reached(s))
            if status.done or status.state == "failed" or time.monotonic() > deadline:
                return status
            await asyncio.sleep(poll_s)


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
