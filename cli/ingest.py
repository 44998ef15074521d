"""``evidentia ingest``: from a PubMed query, PMIDs (``--full-text`` adds open-access PMC full text) or a
Bookshelf publisher (through the gateway), or from files (straight to Kafka).

Every form shows a live progress bar per stage (discovered / fetched / parsed / embedded) until the job
is done, then a summary with failures. ``--status JOB`` follows an existing job.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cli._common import console, follow_job, gateway_client, print_summary, producer, publish_all
from shared.db.jobs import JobStatus
from shared.events import DocumentDeleted, DocumentFetched, Event
from shared.settings import Settings, get_settings
from shared.topics import DOCUMENTS_FETCHED


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ingest", help="Ingest literature and follow the job's progress.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--query", help='A PubMed query, e.g. "metformin AND type 2 diabetes".')
    src.add_argument("--pmids", help="Comma-separated PubMed ids.")
    src.add_argument(
        "--bookshelf-publisher",
        metavar="PUBLISHER",
        help='Every NCBI Bookshelf Open Access book of a publisher, e.g. "World Health Organization".',
    )
    src.add_argument("--file", type=Path, help="PubMed XML (efetch or baseline, .gz too), a JATS or NXML file.")
    src.add_argument("--jsonl", type=Path, help="JSON-lines documents (docs/ingestion.md).")
    src.add_argument("--dir", type=Path, help="A directory of JATS/NXML/PubMed XML files.")
    src.add_argument("--status", metavar="JOB_ID", help="Follow an existing job.")
    p.add_argument("--max", type=int, default=None, help="Most PMIDs taken from a query (default 500).")
    p.add_argument("--refresh", action="store_true", help="Fetch again documents already stored.")
    p.add_argument(
        "--full-text",
        action="store_true",
        help="With --query/--pmids: also fetch the open-access PMC full text of the PMIDs.",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="Stop following after this many seconds.")
    p.add_argument("--no-wait", action="store_true", help="Start the job and return its id at once.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    if args.full_text and not (args.query or args.pmids):
        console.print("[red]--full-text goes with --query or --pmids[/red]")
        return 2
    if args.query or args.pmids or args.bookshelf_publisher or args.status:
        return asyncio.run(_via_gateway(args, settings))
    return asyncio.run(_from_files(args, settings))


async def _via_gateway(args: argparse.Namespace, settings: Settings) -> int:
    with gateway_client(settings) as http:
        if args.status:
            job_id = args.status
        else:
            body: dict[str, Any] = {"refresh": args.refresh}
            if args.full_text:
                body["full_text"] = True
            if args.query:
                body["query"] = args.query
                body["max_results"] = args.max or settings.ncbi.search_max_results
            elif args.bookshelf_publisher:
                body["bookshelf_publisher"] = args.bookshelf_publisher
            else:
                body["pmids"] = [p.strip() for p in args.pmids.split(",") if p.strip()]
            r = http.post("/v1/ingest", json=body)
            if r.status_code >= 400:
                console.print(f"[red]ingest refused ({r.status_code}):[/red] {r.text}")
                return 1
            job_id = r.json()["job_id"]
            console.print(f"job {job_id} started")
        if args.no_wait:
            print(job_id)
            return 0

        async def fetch() -> JobStatus | None:
            r = await asyncio.to_thread(http.get, f"/v1/ingest/{job_id}")
            return JobStatus.model_validate(r.json()) if r.status_code == 200 else None

        status = await follow_job(fetch, job_id, args.timeout)
    print_summary(status)
    return 0 if status.done and not status.failures else 1


def file_events(args: argparse.Namespace, job_id: str) -> Iterator[DocumentFetched | DocumentDeleted]:
    """The events of ``--file``/``--jsonl``/``--dir``; skipped records are reported, not fatal."""
    from services.fetcher import bulk

    items: Iterator[DocumentFetched | DocumentDeleted | bulk.BulkProblem]
    if args.jsonl:
        items = bulk.iter_jsonl(args.jsonl, job_id=job_id)
    elif args.dir:
        items = bulk.iter_xml_dir(args.dir, job_id=job_id)
    else:
        items = bulk.iter_xml_file(args.file, job_id=job_id)
    for item in items:
        if isinstance(item, bulk.BulkProblem):
            console.print(f"[yellow]skipped[/yellow] {item}")
        else:
            yield item


async def publish_documents(
    settings: Settings,
    events: list[DocumentFetched | DocumentDeleted],
    job_id: str,
    source: str,
    *,
    follow: bool = True,
    timeout: float = 1800.0,
) -> JobStatus | None:
    """Record a job for ``events``, publish them to ``documents.fetched``, and follow it until done."""
    from shared.db import create_pool
    from shared.db.jobs import add_job_documents, create_job, job_status, mark_job, set_stage

    pool = await create_pool(settings.database)
    try:
        await create_job(pool, job_id, "file", {"path": source})
        fetched = [e.document_id for e in events if isinstance(e, DocumentFetched)]
        await add_job_documents(pool, job_id, fetched)
        await set_stage(pool, fetched, "fetched")
        events = await check_in_all(pool, settings, events)
        topics: dict[type[Event], str] = {DocumentFetched: DOCUMENTS_FETCHED, DocumentDeleted: DOCUMENTS_FETCHED}
        async with producer(settings) as broker:
            n = await publish_all(broker, topics, ((e, e.document_id) for e in events))
        await mark_job(pool, job_id, "discovered")
        console.print(f"job {job_id}: published {n} documents from {source}")
        if not follow:
            return None

        async def fetch() -> JobStatus | None:
            return await job_status(pool, job_id)

        return await follow_job(fetch, job_id, timeout)
    finally:
        await pool.close()


async def check_in_all(
    pool: Any, settings: Settings, events: list[DocumentFetched | DocumentDeleted]
) -> list[DocumentFetched | DocumentDeleted]:
    """Large documents by claim check (as the fetcher sends them); one that still cannot travel is marked
    failed with the reason (its job still completes) instead of failing the whole import."""
    from shared.claimcheck import check_in, oversized_reason
    from shared.db.jobs import set_stage

    out: list[DocumentFetched | DocumentDeleted] = []
    for event in events:
        if isinstance(event, DocumentFetched):
            event = await check_in(pool, event, settings.kafka.claim_check_bytes)
            reason = oversized_reason(len(event.model_dump_json().encode()), settings.kafka.max_request_size)
            if reason is not None:
                await set_stage(pool, [event.document_id], "failed", reason, force=True)
                console.print(f"{event.document_id}: {reason}")
                continue
        out.append(event)
    return out


async def _from_files(args: argparse.Namespace, settings: Settings) -> int:
    job_id = uuid.uuid4().hex
    source = str(args.jsonl or args.dir or args.file)
    status = await publish_documents(
        settings, list(file_events(args, job_id)), job_id, source, follow=not args.no_wait, timeout=args.timeout
    )
    if status is None:
        print(job_id)
        return 0
    print_summary(status)
    return 0 if status.done and not status.failures else 1
