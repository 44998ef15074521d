"""How the fetcher splits an ingestion job into tasks, and what a dead-lettered fetcher event does to its job.

A request that fans out (a Bookshelf publisher's packages, with a search beside them) gives its job one task
per package (``bookshelf:<accession>``) and one for the rest (``pubmed-search``): the job stays ``running``
until each is finished, so it cannot look done while a package is unread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from shared.db.jobs import fail_running_job, finish_task
from shared.sources.bookshelf import BOOKSHELF

SEARCH_TASK = "pubmed-search"


def package_task(accession: str) -> str:
    """The job task of one Bookshelf package."""
    return f"{BOOKSHELF.name}:{accession}"


def package_key(job_id: str, accession: str) -> str:
    """Kafka key of a ``bookshelf.packages`` event (no ``:``, so it is never taken for a document id)."""
    return f"{job_id}/{accession}"


def fail_jobs_hook(pool: asyncpg.Pool) -> Callable[[list[str], BaseException], Awaitable[None]]:
    """A dead-letter hook for the fetcher's own topics: a dead-lettered ingest request fails its job, a
    dead-lettered package fails its task (so the job still completes), each with the reason."""

    async def hook(keys: list[str], exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        for key in keys:
            if ":" in key:
                continue  # a document id: fail_documents_hook
            if "/" in key:
                job_id, _, accession = key.partition("/")
                await finish_task(pool, job_id, package_task(accession), f"Bookshelf {accession}: {reason}")
            else:
                await fail_running_job(pool, key, reason)

    return hook
