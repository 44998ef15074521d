"""``evidentia demo``: the whole system on this machine, end to end, then everything stopped again.

Starts local Kafka (KRaft) and PostgreSQL+pgvector unless they already run, applies migrations, creates
topics, starts the six services as separate processes, ingests the bundled real PubMed sample (efetch XML
files and the 500 PubMedQA abstracts through the JSON-lines import), asks a question through the
gateway's HTTP API, prints the cited answer, and stops what it started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from cli._common import console, print_summary
from cli.ask import print_answer

DEFAULT_QUESTION = "Is telephone counseling more effective than tailored print materials for mammography screening?"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="Run the whole stack locally, ingest the sample, answer a question.")
    p.add_argument("--question", default=DEFAULT_QUESTION)
    p.add_argument("--samples", type=Path, default=None, help="Sample folder (default: data/samples).")
    p.add_argument("--keep-running", action="store_true", help="Leave the stack running at the end.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from devstack.common import repo_root
    from devstack.kafka import LocalKafka
    from devstack.postgres import LocalPostgres
    from devstack.processes import ServiceStack

    root = repo_root()
    data = Path(os.environ.get("EVIDENTIA_DEVSTACK_DIR", root / ".data"))
    samples = args.samples or root / "data" / "samples"
    t0 = time.perf_counter()
    kafka = LocalKafka(data / "kafka")
    postgres = LocalPostgres(data / "postgres")
    console.print("[bold]1/5[/bold] starting Kafka and PostgreSQL")
    kafka.ensure_libs()
    started_kafka = kafka.start()
    started_postgres = postgres.start()
    os.environ["EVIDENTIA_KAFKA_BOOTSTRAP"] = kafka.bootstrap
    os.environ["EVIDENTIA_DATABASE_URL"] = postgres.url
    os.environ.setdefault("EVIDENTIA_LOG_FORMAT", "json")
    from shared.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    stack = ServiceStack(log_dir=data / "logs", env=dict(os.environ), gateway_port=settings.service.gateway_port)
    try:
        asyncio.run(_prepare(settings))
        console.print(
            "[bold]2/5[/bold] starting fetcher, parser, embedder, retriever, synthesizer, gateway "
            f"(logs in {data / 'logs'})"
        )
        stack.start(timeout=300)
        console.print("[bold]3/5[/bold] ingesting the bundled sample")
        as_json = bool(getattr(args, "json", False))
        status = asyncio.run(_ingest(settings, samples, show=not as_json))
        if not as_json:
            print_summary(status)
        console.print("[bold]4/5[/bold] asking through the gateway: " + args.question)
        from cli.gateway import GatewayClient

        key = getattr(args, "api_key", None) or os.environ.get("EVIDENTIA_API_KEY")
        with GatewayClient(f"http://127.0.0.1:{settings.service.gateway_port}", key, timeout=120) as gw:
            # The bundled sample only: the demo never depends on reaching NCBI.
            answer = gw.post_json("/v1/ask", {"question": args.question, "top_n": 5, "fetch": "never"}, what="ask")
        if as_json:
            print(json.dumps({"job": status.model_dump(mode="json"), "answer": answer}, indent=2, default=str))
        else:
            print_answer(answer)
        ok = bool(answer["citations"]) and status.done
    finally:
        if not args.keep_running:
            console.print("[bold]5/5[/bold] stopping what the demo started")
            stack.stop()
            if started_kafka:
                kafka.stop()
            if started_postgres:
                postgres.stop()
    console.print(f"\ndemo finished in {time.perf_counter() - t0:.1f}s")
    return 0 if ok else 1


async def _prepare(settings: Any) -> None:
    from shared.db import migrate
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    await migrate(settings.database.url)
    await ensure_topics(
        settings.kafka, standard_topics(settings.kafka.topic_partitions), settings.kafka.replication_factor
    )


async def _ingest(settings: Any, samples: Path, show: bool = True) -> Any:
    from cli.ingest import publish_documents
    from services.fetcher import bulk
    from shared.events import DocumentDeleted, DocumentFetched

    job_id = uuid.uuid4().hex
    events: list[DocumentFetched | DocumentDeleted] = []
    for item in bulk.iter_xml_dir(samples / "pubmed", job_id=job_id):
        if isinstance(item, bulk.BulkProblem):
            raise SystemExit(f"bundled sample unreadable: {item}")
        events.append(item)
    for doc in bulk.iter_jsonl(samples / "pubmedqa500.jsonl", job_id=job_id):
        if isinstance(doc, bulk.BulkProblem):
            raise SystemExit(f"bundled sample unreadable: {doc}")
        events.append(doc)
    return await publish_documents(settings, events, job_id, str(samples), timeout=900, show=show)
