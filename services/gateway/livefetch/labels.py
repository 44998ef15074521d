"""FDA labels fetched at question time for the drug interaction check: one openFDA ingestion job (through the
fetcher, the only service that calls openFDA) for the drugs whose label is not stored, and a bounded wait for
it.

- The job is an ordinary ``fda_label`` ingestion (the source-neutral request ``POST /v1/ingest`` sends for it),
  one source request per drug name, at most :data:`LABELS_PER_DRUG` labels each.
- The wait ends when the job is done (every label embedded or failed, or discovery failed: openFDA unreachable
  or refusing) or ``EVIDENTIA_ASK_FETCH_LABEL_WAIT_S`` after it began; a label still on its way is not read
  now and serves the next question.
- :meth:`LabelFetch.why_missing` says, for a drug whose label still cannot be read, which of these it was.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.gateway.livefetch.poll import poll_until
from shared.db.jobs import JobStatus

LABELS_PER_DRUG = 3
"""Most labels one drug name brings (openFDA holds one label set per manufacturer and product)."""


class LabelIngest(Protocol):
    """What the label fetch needs of the running system (:class:`services.gateway.workflows.backend.GatewayBackend`)."""

    async def ingest_labels(self, drugs: Sequence[str], per_drug: int, trace_id: str) -> str:
        """Start one ingestion job of the FDA labels of ``drugs`` (their names), ``per_drug`` labels each; its id."""
        ...

    async def job(self, job_id: str) -> JobStatus | None: ...


@dataclass
class LabelFetch:
    """What one label fetch did: its job, how it ended, and how long the check waited for it."""

    drugs: list[str]
    job_id: str | None = None
    state: str | None = None
    """The job's state when the wait ended (``done``, ``failed``, or still ``running``/``discovered``)."""
    done: bool = False
    error: str | None = None
    """Why the job failed (openFDA unreachable or refusing), or why no job was started."""
    waited_ms: float = 0.0
    wait_s: float = 0.0

    def why_missing(self) -> str:
        """Why a drug of this fetch still has no label to read."""
        if self.job_id is None:
            return f"its FDA label could not be fetched from openFDA ({self.error or 'no job started'})"
        if self.state == "failed":
            return f"openFDA could not be searched for its label ({(self.error or 'the ingestion job failed')[:300]})"
        if not self.done:
            return (
                f"its FDA label was not fetched within {self.wait_s:g} s (ingestion job {self.job_id} still running; "
                "the label serves later questions)"
            )
        return "openFDA returned no label for it"


class LabelFetcher:
    """The labels of some drugs fetched and waited for, within ``wait_s``."""

    def __init__(
        self,
        backend: LabelIngest,
        wait_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        poll_s: float = 0.25,
    ):
        self.backend = backend
        self.wait_s = wait_s
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s

    async def fetch(self, drugs: Sequence[str], trace_id: str) -> LabelFetch:
        start = self.clock()
        deadline = start + self.wait_s
        out = LabelFetch(list(drugs), wait_s=self.wait_s)
        try:
            out.job_id = await self.backend.ingest_labels(drugs, LABELS_PER_DRUG, trace_id)
        except Exception as exc:  # Kafka or the database refused the job: said, the check goes on without it
            out.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            out.waited_ms = round((self.clock() - start) * 1000, 1)
            return out
        job_id = out.job_id

        async def finished() -> bool:
            status = await self.backend.job(job_id)
            if status is not None:
                out.state, out.done, out.error = status.state, status.done, status.error
            return out.done

        await poll_until(finished, deadline, clock=self.clock, sleep=self.sleep, interval_s=self.poll_s)
        out.waited_ms = round((self.clock() - start) * 1000, 1)
        return out
