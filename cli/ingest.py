"""``evidentia ingest``: from a PubMed query, PMIDs (``--full-text`` adds open-access PMC full text), a query or
record ids at another source (``--source clinicaltrials``) or a Bookshelf publisher (through the gateway), or from
files (straight to Kafka).

Every form shows a live progress bar per stage (discovered / fetched / parsed / embedded) until the job
is done, then a summary with failures. ``--status JOB`` follows an existing job.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from cli import exits
from cli._common import console, follow_job, print_json, print_summary, producer, wants_json
from cli.gateway import Backoff, GatewayClient, GatewayError, client_from_args
from shared.db.jobs import JobStatus
from shared.events import DocumentDeleted, DocumentFetched, Event
from shared.http_retry import RetryableResponse, RetryWait, retry_async
from shared.settings import Settings, get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ingest", help="Ingest literature and follow the job's progress.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--query", help='A query at --source (PubMed by default), e.g. "metformin AND type 2 diabetes".')
    src.add_argument("--pmids", help="Comma-separated PubMed ids.")
    src.add_argument("--ids", help="Comma-separated record ids at --source, e.g. NCT numbers.")
    src.add_argument(
        "--condition", help="ClinicalTrials.gov: studies of this condition (query.cond), with --source clinicaltrials."
    )
    src.add_argument(
        "--bookshelf-publisher",
        metavar="PUBLISHER",
        help='Every NCBI Bookshelf Open Access book of a publisher, e.g. "World Health Organization".',
    )
    src.add_argument("--file", type=Path, help="PubMed XML (efetch or baseline, .gz too), a JATS or NXML file.")
    src.add_argument("--jsonl", type=Path, help="JSON-lines documents (docs/ingestion.md).")
    src.add_argument("--dir", type=Path, help="A directory of JATS/NXML/PubMed XML files.")
    src.add_argument("--status", metavar="JOB_ID", help="Follow an existing job.")
    p.add_argument(
        "--source",
        choices=["pubmed", "pmc", "clinicaltrials", "fda_label"],
        default="pubmed",
        help="Where --query, --ids and --condition go (default pubmed).",
    )
    p.add_argument(
        "--intervention",
        help="ClinicalTrials.gov: studies of this intervention (query.intr), beside --query or --condition.",
    )
    p.add_argument("--max", type=int, default=None, help="Most records taken from a query (default 500).")
    p.add_argument("--refresh", action="store_true", help="Fetch again documents already stored.")
    p.add_argument(
        "--full-text",
        action="store_true",
        help="With --query/--pmids: also fetch the open-access PMC full text of the PMIDs.",
    )
    p.add_argument(
        "--priority",
        type=int,
        choices=range(0, 101),
        metavar="0-100",
        default=None,
        help="Search priority of the job's documents: 0 never returned, 10 low, 50 normal, 100 high "
        "(default: new documents 50, stored ones keep theirs).",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="Stop following after this many seconds.")
    p.add_argument("--no-wait", action="store_true", help="Start the job and return its id at once.")
    p.add_argument(
        "--poll-interval", type=float, default=1.0, help="First seconds between progress checks (grows to the max)."
    )
    p.add_argument(
        "--max-poll-interval",
        type=float,
        default=10.0,
        help="Longest seconds between progress checks while a job shows no progress.",
    )
    p.add_argument(
        "--outage-s",
        type=float,
        default=120.0,
        help="How long to keep trying while the gateway is unreachable or answers 502/503/504.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    if args.full_text and not (args.query or args.pmids):
        console.print("[red]--full-text goes with --query or --pmids[/red]")
        return exits.USAGE
    if (args.condition or args.intervention) and args.source != "clinicaltrials":
        console.print("[red]--condition and --intervention go with --source clinicaltrials[/red]")
        return exits.USAGE
    if args.query or args.pmids or args.ids or args.condition or args.bookshelf_publisher or args.status:
        return asyncio.run(_via_gateway(args, settings))
    return asyncio.run(_from_files(args, settings))


def _request_body(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    body: dict[str, Any] = {"refresh": args.refresh}
    if args.priority is not None:
        body["priority"] = args.priority
    if args.full_text:
        body["full_text"] = True
    if args.source != "pubmed":
        body["source"] = args.source
    for name in ("condition", "intervention"):
        if getattr(args, name, None):
            body[name] = getattr(args, name)
    if args.query or args.condition:
        if args.query:
            body["query"] = args.query
        caps = {"clinicaltrials": settings.clinicaltrials.max_results, "fda_label": settings.openfda.max_results}
        cap = caps.get(args.source, settings.ncbi.search_max_results)
        body["max_results"] = args.max or cap
    elif args.ids:
        body["ids"] = [i.strip() for i in args.ids.split(",") if i.strip()]
    elif args.bookshelf_publisher:
        body["bookshelf_publisher"] = args.bookshelf_publisher
    else:
        body["pmids"] = [p.strip() for p in args.pmids.split(",") if p.strip()]
    return body


class JobPoller:
    """Reads a job's status from the gateway for :func:`follow_job`.

    A 429 is waited out by the client (``Retry-After``); a gateway that is briefly unreachable or answering
    502/503/504 (a restart, a rollout) is tried again with back-off for up to ``outage_s`` seconds, saying so;
    a 404 is "no such job"; any other refusal ends the command with its reason."""

    def __init__(self, gw: GatewayClient, job_id: str, deadline: float, outage_s: float):
        self.gw = gw
        self.job_id = job_id
        self.deadline = deadline
        self.outage_s = outage_s
        self.polls = 0
        self._rate_limited_seen = 0

    def throttled(self) -> bool:
        """Whether the gateway rate limited the reads since the last call (then polling keeps slowing down)."""
        seen, self._rate_limited_seen = self._rate_limited_seen, self.gw.rate_limited
        return self.gw.rate_limited > seen

    async def __call__(self) -> JobStatus | None:
        path = f"/v1/ingest/{self.job_id}"
        backoff = Backoff(initial=1.0, factor=2.0, maximum=15.0)
        outage_since: float | None = None

        async def attempt() -> httpx.Response:
            nonlocal outage_since
            self.polls += 1
            try:
                return await asyncio.to_thread(
                    self.gw.request, "GET", path, what=f"job {self.job_id}", deadline=self.deadline
                )
            except GatewayError as exc:
                if exc.status == 404:
                    raise GatewayError(
                        f"no ingestion job {self.job_id} at {self.gw.base_url}", exits.NOINPUT, 404, exc.detail
                    ) from None
                if exc.exit_code not in (exits.UNAVAILABLE, exits.TEMPFAIL) or exc.status == 429:
                    raise
                outage_since = outage_since or time.monotonic()
                raise RetryableResponse(exc.message, status=exc.status, response=exc) from None

        def outage_over() -> bool:
            now = time.monotonic()
            return outage_since is not None and (now - outage_since > self.outage_s or now > self.deadline)

        def before_wait(retry: int, failure: RetryableResponse, wait: float) -> None:
            console.print(
                f"{failure.problem}; trying again in {wait:.0f} s", style="yellow", markup=False, highlight=False
            )

        try:
            r = await retry_async(
                attempt,
                wait=RetryWait(backoff=lambda _retry: backoff.next()),
                sleep=asyncio.sleep,
                max_attempts=None,
                give_up=outage_over,
                before_wait=before_wait,
            )
        except RetryableResponse as failure:
            exc = failure.response
            assert isinstance(exc, GatewayError) and outage_since is not None
            raise GatewayError(
                f"{exc.message} (still failing after {time.monotonic() - outage_since:.0f} s; the job may still be "
                f"running: follow it with `evidentia ingest --status {self.job_id}`)",
                exc.exit_code,
                exc.status,
                exc.detail,
            ) from None
        return JobStatus.model_validate(r.json())


async def _via_gateway(args: argparse.Namespace, settings: Settings) -> int:
    as_json = wants_json(args)

    def notify(msg: str) -> None:  # on stderr even with --json: stdout carries only the result
        console.print(msg, style="yellow", markup=False, highlight=False)

    deadline = time.monotonic() + args.timeout
    with client_from_args(args, notify=notify) as gw:
        if args.status:
            job_id = args.status
        else:
            accepted = await asyncio.to_thread(
                gw.post_json, "/v1/ingest", _request_body(args, settings), what="ingest", deadline=deadline
            )
            job_id = accepted["job_id"]
            if not as_json:
                console.print(f"job {job_id} started")
        if args.no_wait:
            if as_json:
                print_json({"job_id": job_id, "status_url": f"{gw.base_url}/v1/ingest/{job_id}"})
            else:
                print(job_id)
            return exits.OK
        poller = JobPoller(gw, job_id, deadline, args.outage_s)
        backoff = Backoff(initial=args.poll_interval, factor=1.5, maximum=args.max_poll_interval)
        status = await follow_job(
            poller, job_id, args.timeout, backoff=backoff, show=not as_json, throttled=poller.throttled
        )
    return _finish(args, status)


def _finish(args: argparse.Namespace, status: JobStatus) -> int:
    finished = status.done or status.state == "failed"
    if wants_json(args):
        print_json(status.model_dump(mode="json"))
    else:
        print_summary(status)
        if not finished:
            console.print(
                f"[yellow]job {status.job_id} still running after {args.timeout:.0f} s; follow it with "
                f"`evidentia ingest --status {status.job_id}`[/yellow]"
            )
    if not finished:
        return exits.TEMPFAIL
    return exits.OK if status.done and not status.failures else exits.FAILURE


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
    show: bool = True,
    priority: int | None = None,
) -> JobStatus | None:
    """Record a job for ``events``, publish them to ``documents.fetched`` (:func:`shared.ingestion.submit_documents`,
    the sequence every way of starting a job uses), and follow it until done."""
    from shared.db import create_pool
    from shared.db.jobs import job_status
    from shared.ingestion import submit_documents

    def failed(document_id: str, reason: str) -> None:
        console.print(f"{document_id}: {reason}")

    pool = await create_pool(settings.database)
    try:
        async with producer(settings) as broker:

            async def publish(event: Event, topic: str, key: str) -> None:
                await broker.publish(event, topic=topic, key=key.encode())

            n = await submit_documents(
                pool,
                publish,
                settings.kafka,
                job_id=job_id,
                kind="file",
                # the operator (database credentials) may re-prioritise stored documents: 230_ingest_priority_scope.sql
                params={"path": source}
                if priority is None
                else {"path": source, "priority": priority, "priority_stored": True},
                documents=events,
                window=256,
                on_failed=failed,
            )
        if show:
            console.print(f"job {job_id}: published {n} documents from {source}")
        if not follow:
            return None

        async def fetch() -> JobStatus | None:
            return await job_status(pool, job_id)

        return await follow_job(fetch, job_id, timeout, show=show)
    finally:
        await pool.close()


async def _from_files(args: argparse.Namespace, settings: Settings) -> int:
    job_id = uuid.uuid4().hex
    source = str(args.jsonl or args.dir or args.file)
    status = await publish_documents(
        settings,
        list(file_events(args, job_id)),
        job_id,
        source,
        follow=not args.no_wait,
        timeout=args.timeout,
        show=not wants_json(args),
        priority=args.priority,
    )
    if status is None:
        if wants_json(args):
            print_json({"job_id": job_id})
        else:
            print(job_id)
        return exits.OK
    return _finish(args, status)
