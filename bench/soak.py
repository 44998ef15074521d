"""Soak under chaos: steady ingestion and queries while a random service is kill -9'd and restarted.

    python bench/soak.py                       # 30 minutes (make soak)
    python bench/soak.py --duration 300        # a short run while developing

It starts its own Kafka, PostgreSQL and the six services on free loopback ports (offline synthesis,
no rate limit) and then, for ``--duration`` seconds, at the same time:

* **ingests**: every ``--batch-interval`` seconds one ``POST /v1/ingest`` of ``--batch`` documents,
  first the bundled sample (``data/samples/pubmedqa500.jsonl``; some sent twice, which must not store
  them twice), then generated documents (sentences of the sample recombined, new identifiers);
* **queries**: ``--query-rate`` requests per second, open loop (each on its own schedule, so a slow
  answer does not hide the ones behind it): ``POST /v1/search``, and every ``--ask-every``-th a
  ``POST /v1/ask``;
* **chaos**: every 20-60 s (``--chaos-min``/``--chaos-max``) a random service process gets SIGKILL and
  is started again. The retriever and the synthesizer run two instances each (``--replicas``), as an
  operator runs the services that answer requests; the others one. The gateway is killed too: clients
  then retry their connection, as behind a load balancer; an HTTP answer is never retried.
* **database restarts**: ``--db-restarts`` times (default 1), spread evenly over the run, PostgreSQL is
  stopped (fast shutdown: every session cut mid-statement), left down ``--db-down`` seconds (default 10)
  and started again, while the services keep running. A request that needs the database while it is down
  cannot be answered: its 5xx (a request under way from the stop until 10 s after the database is back) is
  counted apart, by endpoint and status, and any other 5xx is a failure. Accepted work must not be lost:
  the store checks below hold as without the restarts.

Then it waits for every accepted job and checks, in PostgreSQL: every document sent stored once, each
with one chunk version with contiguous ordinals, every chunk exactly one vector, every job ``done`` with
no failure, and that no request got a 5xx. It prints the figures (documents, kills, latency p50/p95 in
and out of chaos windows: from a kill until 10 s after the restarted service is ready) and exits 1 if
a check failed. ``--json`` also writes them to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLE = ROOT / "data" / "samples" / "pubmedqa500.jsonl"
#: Generated documents get PubMed-like ids from here on (the sample's are real PMIDs, far below).
GENERATED_ID_BASE = 990_000_000
#: A chaos window lasts from a kill until this long after the restarted service is ready.
CHAOS_TAIL_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# ----------------------------------------------------------------------------------------- documents


def load_sample() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text().split("\n") if line.strip()]


class DocumentSource:
    """The sample first (a tenth of it sent a second time), then generated documents."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.sample = load_sample()
        self.queue: list[dict[str, Any]] = list(self.sample)
        again = self.rng.sample(self.sample, len(self.sample) // 10)
        for doc in again:  # re-sent later in the run: must not be stored (or embedded) twice
            self.queue.insert(self.rng.randrange(len(self.sample) // 2, len(self.queue) + 1), doc)
        self.sentences = [
            s.strip() + "." for d in self.sample for s in (d.get("abstract") or "").split(". ") if len(s) > 40
        ]
        self.generated = 0

    def _generate(self) -> dict[str, Any]:
        self.generated += 1
        pmid = str(GENERATED_ID_BASE + self.generated)
        words = self.rng.choice(self.sample)["title"].split()
        self.rng.shuffle(words)
        return {
            "source": "pubmed",
            "source_id": pmid,
            "pmid": pmid,
            "title": " ".join(words) + f" (soak {self.generated})",
            "abstract": " ".join(self.rng.sample(self.sentences, self.rng.randint(3, 9))),
            "year": self.rng.randint(1995, 2024),
            "publication_types": ["Journal Article"],
        }

    def take(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            out.append(self.queue.pop(0) if self.queue else self._generate())
        return out


def document_id(doc: dict[str, Any]) -> str:
    return f"{doc.get('source', 'pubmed')}:{doc['source_id']}"


# ----------------------------------------------------------------------------------------- recording


@dataclass
class Call:
    endpoint: str
    start: float
    latency_s: float
    status: int  # 0: no HTTP answer at all (after the connection retries)
    reconnects: int = 0


@dataclass
class Kill:
    service: str
    replica: int
    at: float
    ready_at: float | None = None
    restart_s: float | None = None
    error: str | None = None


@dataclass
class Record:
    calls: list[Call] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)  # document id -> times sent
    ingest_refused: Counter[int] = field(default_factory=Counter)
    db_restarts: list[Kill] = field(default_factory=list)  # PostgreSQL stopped at ``at``, ready at ``ready_at``

    def in_chaos(self, t: float) -> bool:
        return _within(self.kills + self.db_restarts, t)

    def during_db_outage(self, call: Call) -> bool:
        """Whether ``call`` was under way at some point of a database outage (or its tail): a search sent just
        before the stop is answered during it."""
        for k in self.db_restarts:
            end = (k.ready_at if k.ready_at is not None else float("inf")) + CHAOS_TAIL_S
            if call.start <= end and call.start + call.latency_s >= k.at:
                return True
        return False


def _within(windows: list[Kill], t: float) -> bool:
    """Whether ``t`` falls from a window's start until ``CHAOS_TAIL_S`` after it ended (or it never ended)."""
    for k in windows:
        end = (k.ready_at if k.ready_at is not None else float("inf")) + CHAOS_TAIL_S
        if k.at <= t <= end:
            return True
    return False


async def call(
    client: httpx.AsyncClient, base: str, endpoint: str, body: dict[str, Any], record: Record, deadline_s: float
) -> httpx.Response | None:
    """POST with connection retries (the gateway may be restarting), never retrying an HTTP answer."""
    start = time.monotonic()
    reconnects = 0
    response: httpx.Response | None = None
    while True:
        try:
            response = await client.post(f"{base}{endpoint}", json=body)
            break
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
            # refused (gateway down) or dropped by a gateway killed mid-request: try again, like a
            # load balancer would, until the deadline
            reconnects += 1
            if time.monotonic() - start > deadline_s:
                break
            await asyncio.sleep(0.5)
        except httpx.TimeoutException:
            break
    status = response.status_code if response is not None else 0
    record.calls.append(Call(endpoint, start, time.monotonic() - start, status, reconnects))
    return response


# ----------------------------------------------------------------------------------------- the loops


def _job_id(r: httpx.Response) -> str | None:
    try:
        return str(r.json()["job_id"])
    except (ValueError, KeyError, httpx.HTTPError):  # an answer cut short by a killed gateway
        return None


async def ingest_loop(
    base: str, source: DocumentSource, args: argparse.Namespace, record: Record, stop: asyncio.Event
) -> None:
    async with httpx.AsyncClient(timeout=60.0) as client:
        while not stop.is_set():
            docs = source.take(args.batch)
            r = await call(client, base, "/v1/ingest", {"documents": docs}, record, deadline_s=120.0)
            job_id = _job_id(r) if r is not None and r.status_code == 202 else None
            if job_id is not None:
                record.jobs.append(job_id)
                for d in docs:
                    record.sent[document_id(d)] = record.sent.get(document_id(d), 0) + 1
            else:
                record.ingest_refused[r.status_code if r is not None else 0] += 1  # 0: no (whole) answer
                source.queue[:0] = docs  # not accepted: send them again later
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.batch_interval)


async def query_loop(
    base: str, questions: list[str], args: argparse.Namespace, record: Record, stop: asyncio.Event
) -> None:
    rng = random.Random(args.seed + 1)
    tasks: set[asyncio.Task[Any]] = set()
    async with httpx.AsyncClient(timeout=90.0) as client:
        n = 0
        next_at = time.monotonic()
        while not stop.is_set():
            n += 1
            q = rng.choice(questions)
            if args.ask_every and n % args.ask_every == 0:
                coro = call(
                    client, base, "/v1/ask", {"question": q, "top_n": 5, "fetch": "never"}, record, deadline_s=60.0
                )
            else:
                coro = call(client, base, "/v1/search", {"query": q, "top_n": 10}, record, deadline_s=60.0)
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += 1.0 / args.query_rate
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        if tasks:
            await asyncio.wait(tasks)


def chaos_loop(stacks: list[Any], args: argparse.Namespace, record: Record, stop: threading.Event) -> None:
    """Every 20-60 s: SIGKILL one service process (any replica) chosen at random, then start it again."""
    from devstack.processes import ServiceStartError

    rng = random.Random(args.seed + 2)
    targets = [(i + 1, st, n) for i, st in enumerate(stacks) for n in st.services if n in args.kill]
    while not stop.wait(rng.uniform(args.chaos_min, args.chaos_max)):
        replica, stack, name = rng.choice(targets)
        kill = Kill(name, replica, time.monotonic())
        record.kills.append(kill)
        stack.processes[name].kill()
        print(f"[{time.strftime('%H:%M:%S')}] kill -9 {name} (replica {replica})", flush=True)
        for attempt in range(5):
            try:
                stack.start(timeout=300, names=[name])
            except ServiceStartError as e:
                kill.error = str(e)[-400:]
                print(f"restart of {name} failed (attempt {attempt + 1}): {str(e)[:300]}", flush=True)
                stack.processes[name].kill()
                time.sleep(5)
                continue
            kill.ready_at = time.monotonic()
            kill.restart_s = kill.ready_at - kill.at
            print(f"[{time.strftime('%H:%M:%S')}] {name} ready again after {kill.restart_s:.1f}s", flush=True)
            break
        else:
            print(f"[{time.strftime('%H:%M:%S')}] {name} could not be restarted: left down", flush=True)


def db_restart_loop(postgres: Any, args: argparse.Namespace, record: Record, stop: threading.Event) -> None:
    """``--db-restarts`` times, evenly spread over the run: stop PostgreSQL, wait ``--db-down`` s, start it."""
    t0 = time.monotonic()
    for i in range(args.db_restarts):
        at = t0 + args.duration * (i + 1) / (args.db_restarts + 1)
        if stop.wait(max(0.0, at - time.monotonic())):
            return
        outage = Kill("postgres", 0, time.monotonic())
        record.db_restarts.append(outage)
        postgres.stop()
        print(f"[{time.strftime('%H:%M:%S')}] PostgreSQL stopped", flush=True)
        stop.wait(args.db_down)  # started again even when the run ends meanwhile
        for attempt in range(5):
            try:
                postgres.start()
            except Exception as e:  # a slow shutdown of the last session: try again
                outage.error = str(e)[-400:]
                print(f"PostgreSQL start failed (attempt {attempt + 1}): {str(e)[:300]}", flush=True)
                time.sleep(5)
                continue
            outage.ready_at = time.monotonic()
            outage.restart_s = outage.ready_at - outage.at
            print(f"[{time.strftime('%H:%M:%S')}] PostgreSQL up again after {outage.restart_s:.1f}s", flush=True)
            break


# ----------------------------------------------------------------------------------------- checks


async def wait_jobs(base: str, jobs: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    pending = set(jobs)
    final: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(timeout=30.0) as client:
        while pending and time.monotonic() < deadline:
            for job in sorted(pending):
                try:
                    r = await client.get(f"{base}/v1/ingest/{job}")
                except httpx.HTTPError:
                    continue
                if r.status_code == 200:
                    final[job] = r.json()
                    if final[job]["done"]:
                        pending.discard(job)
            if pending:
                await asyncio.sleep(2.0)
    return final


async def store_checks(url: str, sent: dict[str, int]) -> dict[str, Any]:
    import asyncpg

    ids = sorted(sent)
    conn = await asyncpg.connect(url)
    try:
        table = await conn.fetchval("SELECT table_name FROM vector_indexes WHERE state = 'active'")
        docs = await conn.fetchval("SELECT count(*) FROM documents WHERE document_id = ANY($1::text[])", ids)
        per_doc = await conn.fetch(
            """SELECT document_id, count(*) AS chunks, count(DISTINCT ordinal) AS ordinals,
                      min(ordinal) AS first, max(ordinal) AS last,
                      count(DISTINCT split_part(chunk_id, '#', 2)) AS versions
               FROM chunks WHERE document_id = ANY($1::text[]) GROUP BY document_id""",
            ids,
        )
        bad_docs = [
            r["document_id"]
            for r in per_doc
            if not (r["versions"] == 1 and r["ordinals"] == r["chunks"] and r["first"] == 0)
            or r["last"] != r["chunks"] - 1
        ]
        vectors = await conn.fetch(
            f"""SELECT c.chunk_id, count(v.chunk_id) AS n FROM chunks c LEFT JOIN {table} v
                    ON v.chunk_id = c.chunk_id
                WHERE c.document_id = ANY($1::text[]) GROUP BY c.chunk_id""",
            ids,
        )
        not_one = [r["chunk_id"] for r in vectors if r["n"] != 1]
        stuck = await conn.fetchval("SELECT count(*) FROM ingest_jobs WHERE state <> 'discovered'")
        return {
            "documents_sent": len(ids),
            "documents_sent_twice_or_more": sum(1 for n in sent.values() if n > 1),
            "documents_stored": int(docs),
            "documents_with_chunks": len(per_doc),
            "documents_with_bad_chunks": bad_docs[:20],
            "chunks": len(vectors),
            "chunks_without_exactly_one_vector": not_one[:20],
            "chunks_without_exactly_one_vector_count": len(not_one),
            "jobs_in_store_not_discovered": int(stuck),
        }
    finally:
        await conn.close()


# ----------------------------------------------------------------------------------------- main


def summarise(record: Record, checks: dict[str, Any], jobs: dict[str, dict[str, Any]], wall_s: float) -> dict[str, Any]:
    queries = [c for c in record.calls if c.endpoint in ("/v1/search", "/v1/ask")]
    out: dict[str, Any] = {"wall_s": round(wall_s, 1), "kills": len(record.kills)}
    out["kills_per_service"] = dict(Counter(k.service for k in record.kills))
    restarts = [k.restart_s for k in record.kills if k.restart_s is not None]
    out["restart_s_p50"] = percentile(restarts, 50)
    out["restart_s_max"] = max(restarts) if restarts else None
    out["restart_errors"] = [f"{k.service}: {k.error}" for k in record.kills if k.error]
    for name in ("/v1/search", "/v1/ask"):
        calls = [c for c in queries if c.endpoint == name]
        chaos = [c.latency_s * 1000 for c in calls if record.in_chaos(c.start) and 200 <= c.status < 300]
        calm = [c.latency_s * 1000 for c in calls if not record.in_chaos(c.start) and 200 <= c.status < 300]
        out[name] = {
            "requests": len(calls),
            "ok": sum(1 for c in calls if c.status == 200),
            "status": dict(Counter(c.status for c in calls)),
            "5xx": sum(1 for c in calls if c.status >= 500),
            "no_answer": sum(1 for c in calls if c.status == 0),
            "reconnected": sum(1 for c in calls if c.reconnects),
            "p50_ms_calm": percentile(calm, 50),
            "p95_ms_calm": percentile(calm, 95),
            "p50_ms_chaos": percentile(chaos, 50),
            "p95_ms_chaos": percentile(chaos, 95),
            "requests_in_chaos": sum(1 for c in calls if record.in_chaos(c.start)),
        }
    ingest = [c for c in record.calls if c.endpoint == "/v1/ingest"]
    out["ingest_requests"] = len(ingest)
    out["ingest_5xx"] = sum(1 for c in ingest if c.status >= 500)
    out["ingest_not_accepted"] = dict(record.ingest_refused)
    out["jobs_accepted"] = len(record.jobs)
    out["jobs_done"] = sum(1 for j in record.jobs if jobs.get(j, {}).get("done"))
    out["jobs_state"] = dict(Counter(str(jobs.get(j, {}).get("state")) for j in record.jobs))
    out["jobs_with_failures"] = [j for j in record.jobs if jobs.get(j, {}).get("failures")][:10]
    out.update(checks)
    out["db_restarts"] = len(record.db_restarts)
    out["db_down_s"] = [round(k.restart_s, 1) for k in record.db_restarts if k.restart_s is not None]
    # While the database is down a request that needs it cannot be answered: counted apart, by status.
    unavailable = [c for c in record.calls if c.status >= 500 and record.during_db_outage(c)]
    out["5xx_during_db_outage"] = dict(Counter(f"{c.endpoint} {c.status}" for c in unavailable))
    five = sum(1 for c in record.calls if c.status >= 500) - len(unavailable)
    out["total_5xx"] = five
    problems = []
    if five:
        problems.append(f"{five} answers were 5xx (besides those while the database was down)")
    if any(k.ready_at is None for k in record.kills):
        problems.append("a killed service could not be restarted")
    if any(k.ready_at is None for k in record.db_restarts):
        problems.append("PostgreSQL could not be started again")
    if out["jobs_done"] != len(record.jobs):
        problems.append(f"{len(record.jobs) - out['jobs_done']} jobs not done")
    if out["jobs_with_failures"]:
        problems.append("jobs with failed documents")
    if checks["documents_stored"] != checks["documents_sent"]:
        problems.append("documents stored != documents sent")
    if checks["documents_with_chunks"] != checks["documents_sent"] or checks["documents_with_bad_chunks"]:
        problems.append("documents without exactly one clean chunk version")
    if checks["chunks_without_exactly_one_vector_count"]:
        problems.append("chunks without exactly one vector")
    out["problems"] = problems
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--duration", type=float, default=1800.0, help="Seconds of load and chaos (default 1800).")
    p.add_argument("--batch", type=int, default=10, help="Documents per ingest request (default 10).")
    p.add_argument("--batch-interval", type=float, default=10.0, help="Seconds between ingest requests.")
    p.add_argument("--query-rate", type=float, default=1.0, help="Queries per second (default 1).")
    p.add_argument("--ask-every", type=int, default=5, help="Every N-th query is a /v1/ask (0: none).")
    p.add_argument("--chaos-min", type=float, default=20.0)
    p.add_argument("--chaos-max", type=float, default=60.0)
    p.add_argument(
        "--kill",
        default="fetcher,parser,embedder,retriever,synthesizer,gateway",
        help="Services the chaos loop may kill (comma separated).",
    )
    p.add_argument(
        "--replicas",
        default="retriever=2,synthesizer=2",
        help="Instances of the services that answer requests (as an operator runs them; a single one killed "
        "leaves searches unanswered until it is back). Default retriever=2,synthesizer=2.",
    )
    p.add_argument(
        "--db-restarts",
        type=int,
        default=1,
        help="Times PostgreSQL is stopped and started again during the run, evenly spread (default 1; 0: never).",
    )
    p.add_argument("--db-down", type=float, default=10.0, help="Seconds PostgreSQL stays down each time (default 10).")
    p.add_argument("--drain-timeout", type=float, default=1200.0, help="Seconds to wait for the jobs at the end.")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--root", type=Path, default=None, help="Work directory (default: a temporary one).")
    p.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    args = p.parse_args(argv)
    args.kill = [s.strip() for s in str(args.kill).split(",") if s.strip()]
    args.replicas = {
        k.strip(): int(v) for k, v in (item.split("=", 1) for item in str(args.replicas).split(",") if item.strip())
    }
    return args


async def _prepare(bootstrap: str, url: str, partitions: int) -> None:
    from shared.db import migrate
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    await migrate(url)
    await ensure_topics(bootstrap, standard_topics(partitions))


async def run_load(base: str, args: argparse.Namespace, record: Record) -> None:
    source = DocumentSource(args.seed)
    questions = [d["title"] for d in source.sample if d.get("title")]
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(ingest_loop(base, source, args, record, stop)),
        asyncio.create_task(query_loop(base, questions, args, record, stop)),
    ]
    await asyncio.sleep(args.duration)
    stop.set()
    await asyncio.gather(*loops)


def main(argv: list[str] | None = None) -> int:
    from devstack.kafka import LocalKafka
    from devstack.postgres import LocalPostgres
    from devstack.processes import ServiceStack
    from shared.registry import SERVICES

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evidentia-soak-") as tmp:
        root = args.root or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
        postgres = LocalPostgres(root / "postgres", port=free_port())
        kafka.ensure_libs()
        print(f"starting Kafka and PostgreSQL in {root}", flush=True)
        kafka.start(timeout=180)
        stacks: list[ServiceStack] = []
        try:
            postgres.start()
            env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "EVIDENTIA_ANTHROPIC_API_KEY")}
            env.update(
                {
                    "EVIDENTIA_KAFKA_BOOTSTRAP": kafka.bootstrap,
                    "EVIDENTIA_DATABASE_URL": postgres.url,
                    "EVIDENTIA_KAFKA_TOPIC_PARTITIONS": "3",
                    "EVIDENTIA_LOG_FORMAT": "json",
                    "EVIDENTIA_LOG_LEVEL": "WARNING",
                    "EVIDENTIA_GATEWAY_RATE_LIMIT_PER_MINUTE": "0",  # one client address sends everything
                }
            )
            asyncio.run(_prepare(kafka.bootstrap, postgres.url, 3))
            # Static group membership per replica (as a Kubernetes pod name gives it): a killed instance that is
            # started again takes its partitions back without a rebalance stopping the other replica.
            stack = ServiceStack(
                log_dir=root / "logs", env=env, ports={n: free_port() for n in SERVICES}, instance="r1"
            )
            stacks.append(stack)
            for r in range(2, max(args.replicas.values(), default=1) + 1):
                extra = [n for n, count in args.replicas.items() if count >= r]
                stacks.append(
                    ServiceStack(
                        log_dir=root / f"logs-{r}",
                        env=env,
                        services=extra,
                        ports={n: free_port() for n in extra},
                        instance=f"r{r}",
                    )
                )
            print(f"starting the services ({', '.join(f'{n} x{c}' for n, c in args.replicas.items())})", flush=True)
            for st in stacks:
                st.start(timeout=600)
            base = f"http://127.0.0.1:{stack.processes['gateway'].port}"
            record = Record()
            stop_chaos = threading.Event()
            chaos = threading.Thread(target=chaos_loop, args=(stacks, args, record, stop_chaos), daemon=True)
            db_chaos = threading.Thread(target=db_restart_loop, args=(postgres, args, record, stop_chaos), daemon=True)
            t0 = time.monotonic()
            print(f"[{time.strftime('%H:%M:%S')}] load and chaos for {args.duration:.0f}s", flush=True)
            chaos.start()
            db_chaos.start()
            asyncio.run(run_load(base, args, record))
            stop_chaos.set()
            chaos.join()  # a restart under way finishes first
            db_chaos.join()
            wall = time.monotonic() - t0
            for st in stacks:  # nothing left dead by the last kill
                for name, proc in st.processes.items():
                    if not proc.alive():
                        st.start(timeout=300, names=[name])
            print(f"[{time.strftime('%H:%M:%S')}] waiting for {len(record.jobs)} jobs", flush=True)
            jobs = asyncio.run(wait_jobs(base, record.jobs, args.drain_timeout))
            checks = asyncio.run(store_checks(postgres.url, record.sent))
            result = summarise(record, checks, jobs, wall)
            result["settings"] = {k: v for k, v in vars(args).items() if k not in ("root", "json")}
            print(json.dumps(result, indent=2, default=str), flush=True)
            if args.json:
                args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
                (args.json.with_suffix(".kills.json")).write_text(
                    json.dumps([asdict(k) for k in record.kills], indent=2) + "\n"
                )
                (args.json.with_suffix(".calls.json")).write_text(json.dumps([asdict(c) for c in record.calls]) + "\n")
            if result["problems"]:
                print("SOAK FAILED: " + "; ".join(result["problems"]), flush=True)
                return 1
            print("soak passed", flush=True)
            return 0
        finally:
            for st in reversed(stacks):
                st.stop()
            kafka.stop()
            postgres.stop()


if __name__ == "__main__":
    raise SystemExit(main())
