"""Ingest benchmark (issue 34): documents -> searchable vectors through the whole running pipeline.

    .venv/bin/python bench/ingest.py --docs 300 --path jsonl [--json]
    .venv/bin/python bench/ingest.py --docs 10000 --path jsonl,eutils --raw-sample 2000 --json
    .venv/bin/python bench/ingest.py --docs 100000 --model all-MiniLM-L6-v2 --json   # a faster stand-in model

What runs. Kafka, PostgreSQL and the six services (``devstack``; free loopback ports, a temporary folder
unless ``--root``), a fresh stack for each path and size, configured as a user's stack is (every setting
at its default unless ``--env`` says otherwise; ``--model`` sets ``EVIDENTIA_EMBEDDING_MODEL``).

Where the documents come from. ``--docs`` PubMed-like abstracts synthesised deterministically from the
bundled PubMedQA sample (``data/samples/pubmedqa500.jsonl``, read by :func:`scale.load_source`): document
``j`` takes one real abstract (seeded by ``j`` alone) as its primary, keeps its title, year, MeSH terms and
sentence count, 60-70 % of its sentences in order and fills the rest with sentences of other abstracts, so
lengths (hence chunks per document and tokens per chunk) follow real abstracts. PMIDs are ``90000000 + j``
(above any real PMID).

* ``jsonl``: the documents as a JSON-lines file (the ``docs/ingestion.md`` format) published by
  ``evidentia ingest --jsonl``'s own function (:func:`cli.ingest.publish_documents`).
* ``eutils``: the same documents as ``PubmedArticle`` XML served by the fake E-utilities
  (``tests/fakes/eutils_server.py``) for one query; the job is started as ``evidentia ingest --query`` does
  (``POST /v1/ingest`` on the gateway) and the fetcher pages ``esearch`` and ``efetch`` (NCBI's key rate,
  10 calls/s, unless ``--env`` sets ``EVIDENTIA_NCBI_RATE_PER_S``).

What it measures, per path and size:

* documents/s and chunks/s from the start (the first document published to ``documents.fetched``, or the
  ``POST`` for the query path) to the last document searchable (its ``document_status`` turned ``embedded``:
  the retriever sets it once every chunk of the document has its vector committed);
* publish-to-searchable per document, p50/p95/max: the Kafka timestamp of its ``DocumentFetched`` record
  to the ``updated_at`` of its ``embedded`` status (one host clock);
* each stage's busy share: the CPU seconds of each process (``psutil``, all threads, PostgreSQL's postmaster
  and backends together, Kafka's JVM) over the run, as a share of the cores' time (wall x CPUs) and of the
  CPU used. CPU time rather than the services' handler-time metrics because on a CPU machine the cores are
  the one shared resource, and handler time counts waits (a handler blocked by back-pressure or on the
  database looks busy) while Kafka and PostgreSQL have no handler metrics at all. The embedder's model
  time (``evidentia_embed_batch_seconds``, scraped from its ``/metrics``) is reported beside it: the share
  of the run the model was encoding, and its passages/s while it was;
* the embedder's raw encode rate: the same embedder code (``shared.embedding.get_embedder`` with the
  service's settings) encoding the very chunk texts stored by the run (``chunks.embedding_text``, or a
  seeded sample of ``--raw-sample`` of them), in this process, after the pipeline run with the stack idle,
  as the service encodes a full consumed batch: token ids made outside the clock (the parser ships them),
  ``consume_batch`` chunks per call, ``batch_size`` per forward pass. The ratio ``chunks/s end-to-end /
  raw chunks/s`` is the issue's figure (>= 0.90 on CPU: the model is the bottleneck and nothing else may
  waste it).

The load average and the other processes' CPU during the run (``psutil``, everything not started here) are
recorded: on a shared machine the ratio is only meaningful with what ran beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from load import _env, _prepare, percentile  # noqa: E402
from scale import Abstract, Source, load_source  # noqa: E402

from devstack.common import free_port  # noqa: E402

PMID_BASE = 90_000_000
QUERY = "evidentia ingest benchmark"
TARGET_RATIO = 0.90


# ----------------------------------------------------------------------------------------- the documents


@dataclass(frozen=True)
class SynthDoc:
    pmid: str
    title: str
    sentences: list[str]
    year: int
    mesh: list[str]

    @property
    def abstract(self) -> str:
        return " ".join(self.sentences)

    def json_line(self) -> str:
        return json.dumps(
            {
                "source": "pubmed",
                "source_id": self.pmid,
                "pmid": self.pmid,
                "title": self.title,
                "abstract": self.abstract,
                "year": self.year,
                "pub_date": str(self.year),
                "mesh": [{"descriptor": m, "qualifiers": [], "major": False} for m in self.mesh],
                "language": "eng",
            }
        )

    def pubmed_xml(self) -> str:
        e = html.escape
        mesh = "".join(
            f'<MeshHeading><DescriptorName MajorTopicYN="N">{e(m)}</DescriptorName></MeshHeading>' for m in self.mesh
        )
        return (
            f'<PubmedArticle><MedlineCitation Owner="NLM" Status="MEDLINE"><PMID Version="1">{self.pmid}</PMID>'
            f'<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Print"><PubDate><Year>{self.year}</Year>'
            f"</PubDate></JournalIssue><Title>Journal of Synthetic Benchmarks</Title></Journal>"
            f"<ArticleTitle>{e(self.title)}</ArticleTitle><Abstract><AbstractText>{e(self.abstract)}</AbstractText>"
            f"</Abstract><Language>eng</Language><PublicationTypeList><PublicationType>Journal Article"
            f"</PublicationType></PublicationTypeList></Article><MeshHeadingList>{mesh}</MeshHeadingList>"
            f'</MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="pubmed">{self.pmid}</ArticleId>'
            f"</ArticleIdList></PubmedData></PubmedArticle>"
        )


def synthesise(source: Source, n: int, seed: int = 34) -> list[SynthDoc]:
    """``n`` PubMed-like abstracts; document ``j`` depends on (``seed``, ``j``) alone."""
    abstracts: list[Abstract] = source.abstracts
    docs = []
    for j in range(n):
        rng = random.Random(seed * 1_000_003 + j)
        a = abstracts[rng.randrange(len(abstracts))]
        total = len(a.sentences)
        own = max(1, round(total * rng.uniform(0.6, 0.7)))
        start = rng.randrange(max(1, total - own + 1))
        sentences = list(a.sentences[start : start + own])
        while len(sentences) < total:
            other = abstracts[rng.randrange(len(abstracts))]
            sentences.insert(rng.randrange(len(sentences) + 1), rng.choice(other.sentences))
        # Whitespace collapsed as PubMed XML's parser collapses it: both paths embed the very same text.
        sentences = [" ".join(s.split()) for s in sentences]
        title = " ".join(a.title.split())
        docs.append(SynthDoc(str(PMID_BASE + j), title, sentences, a.year or rng.randint(1990, 2025), a.mesh[:12]))
    return docs


# ----------------------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    bootstrap: str
    database_url: str
    gateway_url: str
    services: Any  # devstack.processes.ServiceStack
    pids: dict[str, int]  # stage name -> pid (postgres: the postmaster)
    partitions: int  # of each pipeline topic


@contextmanager
def pipeline_stack(root: Path, env_extra: dict[str, str]) -> Iterator[Stack]:
    """Kafka, PostgreSQL (migrated, topics made) and the six services on free loopback ports, nothing ingested."""
    from devstack.kafka import LocalKafka
    from devstack.postgres import LocalPostgres
    from devstack.processes import SERVICES, ServiceStack

    os.chmod(root, 0o755)
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
    postgres = LocalPostgres(root / "postgres", port=free_port())
    kafka.ensure_libs()
    kafka.start(timeout=180)
    services: ServiceStack | None = None
    try:
        postgres.start()
        env = dict(os.environ)
        env.pop("ANTHROPIC_API_KEY", None)
        env.pop("EVIDENTIA_ANTHROPIC_API_KEY", None)
        env.update(
            {
                "EVIDENTIA_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "EVIDENTIA_DATABASE_URL": postgres.url,
                "EVIDENTIA_LOG_LEVEL": "WARNING",
                "EVIDENTIA_GATEWAY_RATE_LIMIT_PER_MINUTE": "0",
                **env_extra,
            }
        )
        with _env({k: env[k] for k in ("EVIDENTIA_KAFKA_BOOTSTRAP", "EVIDENTIA_DATABASE_URL")}):
            from shared.settings import Settings

            settings = Settings()
            asyncio.run(_prepare(settings))
        services = ServiceStack(log_dir=root / "logs", env=env, ports={n: free_port() for n in SERVICES})
        services.start(timeout=300)
        pids = {name: p.pid for name, p in services.processes.items() if p.pid is not None}
        pids["postgres"] = postgres.status().pid or 0
        pids["kafka"] = kafka.status().pid or 0
        yield Stack(
            kafka.bootstrap,
            postgres.url,
            f"http://127.0.0.1:{services.processes['gateway'].port}",
            services,
            pids,
            settings.kafka.topic_partitions,
        )
    finally:
        if services is not None:
            services.stop()
        kafka.stop()
        postgres.stop()


def process_cpu(pid: int, children: bool = True) -> float:
    """CPU seconds of ``pid`` (all threads) and, with ``children``, of its children, alive (now) or reaped."""
    try:
        proc = psutil.Process(pid)
        t = proc.cpu_times()
        if not children:
            return float(t.user + t.system)
        total = t.user + t.system + t.children_user + t.children_system
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                total += c.user + c.system
        return float(total)
    except psutil.Error:
        return float("nan")


class CpuMeter:
    """CPU seconds per stage between ``start()`` and ``stop()``, and the whole machine's (the rest: beside)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start_at = 0.0
        self.before: dict[str, float] = {}
        self.machine_before = 0.0
        self.load: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> tuple[dict[str, float], float]:
        per = {name: process_cpu(pid) for name, pid in self.pids.items()}
        m = psutil.cpu_times()
        return per, float(m.user + m.system + m.nice + getattr(m, "irq", 0.0) + getattr(m, "softirq", 0.0))

    def start(self) -> None:
        self.start_at = time.perf_counter()
        self.before, self.machine_before = self._sample()
        self.bench_before = process_cpu(os.getpid(), children=False)  # the services are its children

        def watch() -> None:
            while not self._stop.wait(5.0):
                self.load.append(os.getloadavg()[0])

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.start_at
        after, machine_after = self._sample()
        self._stop.set()
        cpus = psutil.cpu_count() or 1
        used = {name: after[name] - self.before[name] for name in self.pids}
        used["bench (this process)"] = process_cpu(os.getpid(), children=False) - self.bench_before
        ours = sum(v for v in used.values() if v == v)
        machine = machine_after - self.machine_before
        capacity = wall * cpus
        return {
            "wall_s": round(wall, 2),
            "cpus": cpus,
            "cpu_s": {k: round(v, 2) for k, v in used.items()},
            "share_of_cores": {k: round(v / capacity, 4) for k, v in used.items()},
            "share_of_cpu_used_by_stack": {k: round(v / ours, 4) for k, v in used.items()} if ours else {},
            "beside_cpu_s": round(machine - ours, 2),
            "beside_share_of_cores": round((machine - ours) / capacity, 4),
            "load_average_mean": round(sum(self.load) / len(self.load), 2) if self.load else os.getloadavg()[0],
        }


def settle(pids: dict[str, int], quiet_cores: float = 0.2, window_s: float = 5.0, limit_s: float = 240.0) -> float:
    """Wait until the stack is idle (its CPU below ``quiet_cores`` in three windows of ``window_s`` in a row);
    the seconds waited (at most ``limit_s``).

    A service is ready before its background warm-ups end (the gateway's and the synthesizer's emergency
    guard loads a torch model after /readyz answers, ~1 core for seconds); an idle stack uses ~0.1 core
    (the consumers' polls and Kafka). Measured from "ready", a run would pay for start-up work.
    """
    started = time.perf_counter()
    quiet = 0
    while quiet < 3 and time.perf_counter() - started < limit_s:
        before = sum(process_cpu(p) for p in pids.values())
        time.sleep(window_s)
        used = sum(process_cpu(p) for p in pids.values()) - before
        quiet = quiet + 1 if used < quiet_cores * window_s else 0
    return time.perf_counter() - started


def scrape(port: int) -> dict[str, float]:
    """The embedder's Prometheus counters this benchmark reads (sum over label sets)."""
    wanted = (
        "evidentia_embed_batch_seconds_sum",
        "evidentia_embed_batch_seconds_count",
        "evidentia_embedded_passages_total",
    )
    out = dict.fromkeys(wanted, 0.0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


# ----------------------------------------------------------------------------------------- one run


async def _publish_jsonl(stack: Stack, path: Path, job_id: str) -> None:
    from cli.ingest import publish_documents
    from services.fetcher.bulk import iter_jsonl
    from shared.events import DocumentFetched
    from shared.settings import Settings

    with _env({"EVIDENTIA_KAFKA_BOOTSTRAP": stack.bootstrap, "EVIDENTIA_DATABASE_URL": stack.database_url}):
        settings = Settings()
    events = [e for e in iter_jsonl(path, job_id=job_id) if isinstance(e, DocumentFetched)]
    await publish_documents(settings, list(events), job_id, str(path), follow=False, show=False)


def _start_query(stack: Stack, n: int) -> str:
    body = json.dumps({"query": QUERY, "max_results": n}).encode()
    req = urllib.request.Request(
        f"{stack.gateway_url}/v1/ingest", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return str(json.loads(r.read())["job_id"])


async def _wait_done(
    database_url: str, job_id: str, n: int, timeout: float, every: float
) -> tuple[dict[str, int], bool]:
    """The job's counts once it is done (True), or when ``timeout`` runs out (False: the figures are partial)."""
    import asyncpg

    from shared.db.jobs import job_status

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        deadline = time.monotonic() + timeout
        last = -1
        while time.monotonic() < deadline:
            status = await job_status(pool, job_id)
            if status is not None:
                embedded = status.counts.get("embedded", 0)
                if embedded != last:
                    print(f"  {embedded}/{n} searchable", flush=True)
                    last = embedded
                if status.total >= n and status.done:
                    return dict(status.counts), True
            await asyncio.sleep(every)
        status = await job_status(pool, job_id)
        print(f"  job {job_id} not done within {timeout:.0f}s: the figures cover what was searchable", flush=True)
        return (dict(status.counts) if status else {}), False
    finally:
        await pool.close()


async def _searchable_at(database_url: str, pmids: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """{document id: epoch seconds it became searchable}, and the texts of its chunks (what was embedded)."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        ids = [f"pubmed:{p}" for p in pmids]
        rows = await conn.fetch(
            "SELECT document_id, extract(epoch FROM updated_at) AS t FROM document_status "
            "WHERE stage = 'embedded' AND document_id = ANY($1::text[])",
            ids,
        )
        texts = await conn.fetch(
            "SELECT embedding_text FROM chunks WHERE document_id = ANY($1::text[]) ORDER BY chunk_id",
            [str(r["document_id"]) for r in rows],
        )
        return {str(r["document_id"]): float(r["t"]) for r in rows}, [str(r["embedding_text"]) for r in texts]
    finally:
        await conn.close()


async def _published_at(bootstrap: str, partitions: int) -> dict[str, float]:
    """{document id: epoch seconds its DocumentFetched record was created} from ``documents.fetched``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from shared.kafka.topics import DOCUMENTS_FETCHED

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(DOCUMENTS_FETCHED, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: dict[str, float] = {}
        remaining = {tp for tp in tps if ends[tp] > 0}
        while remaining:
            batch = await consumer.getmany(timeout_ms=2000, max_records=5000)
            for tp, records in batch.items():
                for r in records:
                    doc_id = json.loads(r.value).get("document_id")
                    if doc_id and doc_id not in out:
                        out[str(doc_id)] = r.timestamp / 1000.0
                    if r.offset + 1 >= ends[tp]:
                        remaining.discard(tp)
        return out
    finally:
        await consumer.stop()


def raw_encode_rate(texts: Sequence[str], model: str | None, sample: int, seed: int = 34) -> dict[str, Any]:
    """The embedder's own code on ``texts`` in this process, as the service encodes a full consumed batch."""
    from shared.embedding import get_embedder
    from shared.settings import EmbeddingSettings

    settings = EmbeddingSettings(**({"model": model} if model else {}))
    chosen = list(texts)
    if sample and len(chosen) > sample:
        chosen = random.Random(seed).sample(chosen, sample)
    embedder = get_embedder(settings)
    embedder.warm_up()
    ids = embedder.passage_token_ids(chosen)
    embedder.encode_pretokenized(ids[:8], settings.batch_size)  # first-call set-up outside the clock
    start, cpu0 = time.perf_counter(), process_cpu(os.getpid(), children=False)
    for i in range(0, len(ids), settings.consume_batch):
        embedder.encode_pretokenized(ids[i : i + settings.consume_batch], settings.batch_size)
    elapsed, cpu = time.perf_counter() - start, process_cpu(os.getpid(), children=False) - cpu0
    return {
        "model": embedder.name,
        "device": embedder.device,
        "texts": len(chosen),
        "of_texts": len(texts),
        "batch_size": settings.batch_size,
        "consume_batch": settings.consume_batch,
        "seconds": round(elapsed, 2),
        "chunks_per_s": round(len(chosen) / elapsed, 2),
        "cpu_ms_per_chunk": round(cpu / len(chosen) * 1000, 1),
    }


def run_path(path: str, docs: list[SynthDoc], args: argparse.Namespace) -> dict[str, Any]:
    n = len(docs)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="evidentia-ingest-"))
    root = root / f"{path}-{n}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env_extra = dict(kv.split("=", 1) for kv in args.env)
    if args.model:
        env_extra["EVIDENTIA_EMBEDDING_MODEL"] = args.model
    fake = None
    if path == "eutils":
        sys.path.insert(0, str(ROOT))
        from tests.fakes.eutils_server import FakeEutils

        fake = FakeEutils(records_dir=None)
        for i in range(0, n, 1000):
            fake.add_pubmed_records(
                (
                    "<PubmedArticleSet>" + "".join(d.pubmed_xml() for d in docs[i : i + 1000]) + "</PubmedArticleSet>"
                ).encode()
            )
        fake.add_search(QUERY, [d.pmid for d in docs])
        fake.start()
        env_extra.setdefault("EVIDENTIA_EUTILS_BASE_URL", fake.url)
        env_extra.setdefault("EVIDENTIA_NCBI_RATE_PER_S", "10")
    try:
        print(f"[{path} {n}] starting Kafka, PostgreSQL and the six services in {root}", flush=True)
        with pipeline_stack(root, env_extra) as stack:
            metrics_port = stack.services.processes["embedder"].port
            before = scrape(metrics_port)
            stack_pids = dict(stack.pids)
            settled_s = settle(stack_pids) if args.settle else 0.0
            print(f"[{path} {n}] stack idle after {settled_s:.0f}s", flush=True)
            meter = CpuMeter(stack_pids)
            job_id = f"bench-{uuid.uuid4().hex[:12]}"
            jsonl = root / "docs.jsonl"
            if path == "jsonl":
                jsonl.write_text("".join(d.json_line() + "\n" for d in docs), encoding="utf-8")
            meter.start()
            started = time.time()
            if path == "jsonl":
                asyncio.run(_publish_jsonl(stack, jsonl, job_id))
            else:
                job_id = _start_query(stack, n)
            counts, complete = asyncio.run(_wait_done(stack.database_url, job_id, n, args.timeout, args.poll))
            cpu = meter.stop()
            after = scrape(metrics_port)
            searchable, texts = asyncio.run(_searchable_at(stack.database_url, [d.pmid for d in docs]))
            published = asyncio.run(_published_at(stack.bootstrap, stack.partitions))
            first = min(published.values()) if path == "jsonl" else started
            end = max(searchable.values())
            wall = end - first
            latencies = [searchable[d] - published[d] for d in searchable if d in published]
            model_s = after["evidentia_embed_batch_seconds_sum"] - before["evidentia_embed_batch_seconds_sum"]
            embedded = after["evidentia_embedded_passages_total"] - before["evidentia_embedded_passages_total"]
            batches = after["evidentia_embed_batch_seconds_count"] - before["evidentia_embed_batch_seconds_count"]
            print(f"[{path} {n}] pipeline done in {wall:.1f}s; raw encode of the same texts, stack idle", flush=True)
            raw = raw_encode_rate(texts, args.model, args.raw_sample)
    finally:
        if fake is not None:
            fake.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    chunks = len(texts)
    rate = chunks / wall
    stack_cpu = sum(v for k, v in cpu["cpu_s"].items() if k in stack_pids)
    return {
        "path": path,
        "documents": n,
        "searchable": len(searchable),
        "chunks": chunks,
        "complete": complete,
        "settled_s": round(settled_s, 1),
        "job_counts": counts,
        "seconds": round(wall, 2),
        "documents_per_s": round(len(searchable) / wall, 2),
        "chunks_per_s": round(rate, 2),
        "publish_to_searchable_s": {
            "p50": round(percentile(latencies, 50), 2),
            "p95": round(percentile(latencies, 95), 2),
            "max": round(max(latencies), 2) if latencies else None,
        },
        "embedder_model": {
            "busy_s": round(model_s, 2),
            "busy_share_of_run": round(model_s / wall, 4),
            "passages": int(embedded),
            "batches": int(batches),
            "mean_batch": round(embedded / batches, 1) if batches else None,
            "passages_per_busy_s": round(embedded / model_s, 2) if model_s else None,
        },
        "cpu": cpu,
        "raw_encode": raw,
        "ratio_to_raw": round(rate / raw["chunks_per_s"], 3),
        "cpu_ms_per_chunk": {k: round(v / chunks * 1000, 1) for k, v in cpu["cpu_s"].items()},
        # What the ratio would be with the cores to the stack alone (every stage CPU-bound): the raw encode's
        # CPU per chunk over the whole stack's (the bench's own polling left out).
        "cpu_ratio_to_raw": round(raw["cpu_ms_per_chunk"] * chunks / 1000 / stack_cpu, 3),
        "target_ratio": TARGET_RATIO,
        "env": env_extra | ({} if fake is None else {"EVIDENTIA_EUTILS_BASE_URL": "(the fake)"}),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first)),
    }


def format_row(r: dict[str, Any]) -> str:
    cpu = r["cpu"]["share_of_cores"]
    shares = " ".join(f"{k.split(' ')[0]}={v:.0%}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
    m = r["embedder_model"]
    return (
        f"{r['path']:6s} {r['documents']:>7d} docs {r['chunks']:>7d} chunks  {r['seconds']:8.1f}s  "
        f"{r['documents_per_s']:7.2f} docs/s {r['chunks_per_s']:7.2f} chunks/s  "
        f"p50 {r['publish_to_searchable_s']['p50']}s p95 {r['publish_to_searchable_s']['p95']}s  "
        f"raw {r['raw_encode']['chunks_per_s']}/s ratio {r['ratio_to_raw']:.3f} (by CPU {r['cpu_ratio_to_raw']:.3f})\n"
        f"       model busy {m['busy_share_of_run']:.0%} of the run at {m['passages_per_busy_s']}/s "
        f"(mean batch {m['mean_batch']})  cores: {shares}  beside: {r['cpu']['beside_share_of_cores']:.0%} "
        f"load {r['cpu']['load_average_mean']}"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", default="300", help="Documents per run, or a list: 10000,100000.")
    p.add_argument("--path", default="jsonl,eutils", help="Of jsonl,eutils.")
    p.add_argument("--model", default=None, help="EVIDENTIA_EMBEDDING_MODEL (default: the configured default).")
    p.add_argument(
        "--raw-sample", type=int, default=0, help="Encode a seeded sample of this many chunk texts (0: all)."
    )
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the services (repeatable).")
    p.add_argument("--timeout", type=float, default=6 * 3600.0, help="Longest wait for one run, seconds.")
    p.add_argument("--poll", type=float, default=2.0, help="Seconds between job status reads.")
    p.add_argument("--root", default=None, help="Folder for the stacks (default: a temporary one).")
    p.add_argument("--keep", action="store_true", help="Keep the stack's folder (logs, data) after the run.")
    p.add_argument("--seed", type=int, default=34)
    p.add_argument(
        "--no-settle",
        dest="settle",
        action="store_false",
        help="Start at once when the services are ready (default: wait until their start-up work is over).",
    )
    p.add_argument("--json", action="store_true", help="Print one JSON object per run instead of a table row.")
    p.add_argument("--out", type=Path, default=None, help="Also write all runs as a JSON list here.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `timeout`/`kill` send SIGTERM: leave through the stacks' clean-up (no Kafka or PostgreSQL left behind).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s) for s in str(args.docs).split(",") if s.strip()]
    paths = [s.strip() for s in args.path.split(",") if s.strip()]
    if not sizes or any(s < 1 for s in sizes) or not paths or set(paths) - {"jsonl", "eutils"}:
        build_parser().error("--docs: positive numbers; --path: jsonl and/or eutils")
    source = load_source(None)
    results = []
    for n in sizes:
        docs = synthesise(source, n, args.seed)
        for path in paths:
            r = run_path(path, docs, args)
            results.append(r)
            print(json.dumps(r) if args.json else format_row(r), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
    return 0 if all(r["complete"] and r["searchable"] == r["documents"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
