"""Load test: K concurrent clients on ``/v1/search`` and ``/v1/ask`` for T seconds, against a running stack.

    python bench/load.py http://127.0.0.1:8000 --clients 8 --duration 20
    python bench/load.py --start-stack --clients 1,8 --duration 15     # own Kafka, Postgres, services, sample

For each endpoint and each client count it prints requests/s, p50/p95/p99 latency and the error count
(any answer but 200, or no answer). Then it runs the same searches *in process* — the retriever's own
code (``RetrieverState``: ``SearchEngine`` + the embedder's ``encode_queries``) on the same database —
so the cost of the gateway + Kafka request/reply round trip is a measured ratio and difference.

Only loopback addresses are accepted, and both the clients (at most 64) and the time (at most 300 s per
run) are bounded. A running gateway's rate limit (per client address when authentication is off) answers
429 to a load test: start it with ``EVIDENTIA_GATEWAY_RATE_LIMIT_PER_MINUTE=0`` (``--start-stack`` does).
``/v1/ask`` runs in offline (extractive) mode: ``--start-stack`` starts the services
without an Anthropic key; against a running stack, it measures whatever mode that stack is in (reported).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from devstack.common import free_port

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLE = ROOT / "data" / "samples" / "pubmedqa500.jsonl"
MAX_CLIENTS = 64
MAX_DURATION_S = 300.0


# ----------------------------------------------------------------------------------------- measuring


@dataclass
class Result:
    name: str
    clients: int
    duration_s: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    extra: dict[str, list[float]] = field(default_factory=dict)

    def error(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    @property
    def count(self) -> int:
        return len(self.latencies_ms)

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "clients": self.clients,
            "requests": self.count,
            "errors": self.errors,
            "rps": round(self.count / self.duration_s, 2) if self.duration_s else 0.0,
            "p50_ms": round(self.pct(50), 2),
            "p95_ms": round(self.pct(95), 2),
            "p99_ms": round(self.pct(99), 2),
        }
        if self.error_kinds:
            out["error_kinds"] = dict(self.error_kinds)
        for key, values in self.extra.items():
            out[f"{key}_p50_ms"] = round(percentile(values, 50), 2)
        return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (NaN for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


Call = Callable[[str], Awaitable[dict[str, float] | None]]


async def drive(name: str, call: Call, queries: list[str], clients: int, duration_s: float) -> Result:
    """``clients`` tasks calling ``call(query)`` back to back until ``duration_s`` is over.

    ``call`` returns extra timings to record (or None) and raises ``Failure`` (or anything) on an error.
    """
    result = Result(name, clients, duration_s)
    deadline = time.perf_counter() + duration_s

    async def client(i: int) -> None:
        n = i
        while time.perf_counter() < deadline:
            query = queries[n % len(queries)]
            n += clients
            start = time.perf_counter()
            try:
                extra = await call(query)
            except Failure as exc:
                result.error(str(exc))
                continue
            except Exception as exc:  # a timeout, a refused connection...: an error, counted
                result.error(type(exc).__name__)
                continue
            result.latencies_ms.append((time.perf_counter() - start) * 1000)
            for key, value in (extra or {}).items():
                result.extra.setdefault(key, []).append(value)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    result.duration_s = time.perf_counter() - started
    return result


class Failure(Exception):
    """A request that got an answer, but not a 200."""


def sample_queries(limit: int = 500) -> list[str]:
    """The sample's titles (PubMedQA titles are questions): every query has an answer in the corpus."""
    out: list[str] = []
    with SAMPLE.open(encoding="utf-8") as fh:
        for line in fh:
            title = json.loads(line).get("title")
            if isinstance(title, str) and title.strip():
                out.append(title.strip())
            if len(out) >= limit:
                break
    return out


# ----------------------------------------------------------------------------------------- the two paths


ASK_MODES: dict[str, int] = {}  # answer modes seen (extractive, llm): what /v1/ask measured


def http_calls(http: httpx.AsyncClient, top_n: int) -> dict[str, Call]:
    async def search(query: str) -> dict[str, float]:
        r = await http.post("/v1/search", json={"query": query, "mode": "hybrid", "top_n": top_n})
        if r.status_code != 200:
            raise Failure(f"HTTP {r.status_code}")
        return {"retriever_took": float(r.json().get("took_ms") or 0.0)}

    async def ask(query: str) -> None:
        r = await http.post("/v1/ask", json={"question": query, "top_n": top_n, "fetch": "never"})  # the store only
        if r.status_code != 200:
            raise Failure(f"HTTP {r.status_code}")
        mode = str(r.json().get("mode"))
        ASK_MODES[mode] = ASK_MODES.get(mode, 0) + 1
        return None

    return {"search": search, "ask": ask}


@contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def direct_search(database_url: str, queries: list[str], clients: int, duration_s: float, top_n: int) -> Result:
    """The retriever's own search path, in this process, on the same database: no HTTP, no Kafka."""
    from services.retriever.handlers import RetrieverState
    from shared.models import SearchFilters
    from shared.settings import Settings

    with _env({"EVIDENTIA_DATABASE_URL": database_url}):
        settings = Settings()
    state = RetrieverState(settings)
    await state.start()
    try:

        async def call(query: str) -> dict[str, float]:
            vector = (await asyncio.to_thread(state.embedder.encode_queries, [query]))[0]
            found = await state.searcher().search(
                query, vector, mode="hybrid", top_k=20, top_n=top_n, filters=SearchFilters()
            )
            return {"retriever_took": float(found.took_ms)}

        await drive("direct-warmup", call, queries, 1, min(2.0, duration_s))
        return await drive("direct search", call, queries, clients, duration_s)
    finally:
        await state.stop()


async def paired_search(
    http: httpx.AsyncClient, database_url: str, queries: list[str], duration_s: float, top_n: int
) -> dict[str, Any]:
    """One client alternating a gateway search and a direct search of the same query, back to back.

    On a machine shared with other work the background load drifts between two separate runs; pairing
    each gateway request with a direct call made a moment later measures the added cost under the same
    load. The figure is the median of the per-query differences.
    """
    from services.retriever.handlers import RetrieverState
    from shared.models import SearchFilters
    from shared.settings import Settings

    with _env({"EVIDENTIA_DATABASE_URL": database_url}):
        settings = Settings()
    state = RetrieverState(settings)
    await state.start()
    gateway_ms: list[float] = []
    direct_ms: list[float] = []
    errors = 0
    try:
        deadline = time.perf_counter() + duration_s
        n = 0
        while time.perf_counter() < deadline:
            query = queries[n % len(queries)]
            n += 1
            start = time.perf_counter()
            r = await http.post("/v1/search", json={"query": query, "mode": "hybrid", "top_n": top_n})
            g = (time.perf_counter() - start) * 1000
            if r.status_code != 200:
                errors += 1
                continue
            start = time.perf_counter()
            vector = (await asyncio.to_thread(state.embedder.encode_queries, [query]))[0]
            await state.searcher().search(query, vector, mode="hybrid", top_k=20, top_n=top_n, filters=SearchFilters())
            d = (time.perf_counter() - start) * 1000
            if n > 3:  # the first few warm both paths up
                gateway_ms.append(g)
                direct_ms.append(d)
    finally:
        await state.stop()
    diffs = [g - d for g, d in zip(gateway_ms, direct_ms, strict=True)]
    return {
        "name": "paired gateway vs direct",
        "clients": 1,
        "pairs": len(diffs),
        "errors": errors,
        "gateway_p50_ms": round(percentile(gateway_ms, 50), 2),
        "direct_p50_ms": round(percentile(direct_ms, 50), 2),
        "added_p50_ms": round(percentile(diffs, 50), 2),
        "added_p95_ms": round(percentile(diffs, 95), 2),
        "p50_ratio": round(percentile(gateway_ms, 50) / percentile(direct_ms, 50), 2) if direct_ms else None,
    }


async def run_bench(
    url: str, database_url: str | None, clients_list: list[int], duration_s: float, endpoints: list[str], top_n: int
) -> list[dict[str, Any]]:
    queries = sample_queries()
    rows: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=MAX_CLIENTS, max_keepalive_connections=MAX_CLIENTS)
    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as http:
        calls = http_calls(http, top_n)
        await drive("warmup", calls["search"], queries, 1, min(2.0, duration_s))
        for clients in clients_list:
            for endpoint in endpoints:
                r = await drive(f"gateway /v1/{endpoint}", calls[endpoint], queries, clients, duration_s)
                rows.append(r.summary())
                print(format_row(rows[-1]), flush=True)
            if database_url and "search" in endpoints:
                d = await direct_search(database_url, queries, clients, duration_s, top_n)
                rows.append(d.summary())
                print(format_row(rows[-1]), flush=True)
                gw = next(r for r in rows if r["name"] == "gateway /v1/search" and r["clients"] == clients)
                ratio = {
                    "name": "gateway+Kafka / direct",
                    "clients": clients,
                    "p50_ratio": round(gw["p50_ms"] / rows[-1]["p50_ms"], 2),
                    "p50_added_ms": round(gw["p50_ms"] - rows[-1]["p50_ms"], 2),
                    "p95_added_ms": round(gw["p95_ms"] - rows[-1]["p95_ms"], 2),
                    "rps_ratio": round(gw["rps"] / rows[-1]["rps"], 2) if rows[-1]["rps"] else None,
                }
                rows.append(ratio)
                print(format_row(ratio), flush=True)
        if database_url and "search" in endpoints:
            pair = await paired_search(http, database_url, queries, duration_s, top_n)
            rows.append(pair)
            print(
                f"  {pair['name']:<26} K=1   {pair['pairs']} pairs: gateway p50 {pair['gateway_p50_ms']} ms, "
                f"direct p50 {pair['direct_p50_ms']} ms, added p50 {pair['added_p50_ms']} ms "
                f"(p95 {pair['added_p95_ms']} ms), ratio x{pair['p50_ratio']}  errors {pair['errors']}",
                flush=True,
            )
    return rows


def format_row(row: dict[str, Any]) -> str:
    if "p50_ratio" in row:
        return (
            f"  {row['name']:<26} K={row['clients']:<3} p50 x{row['p50_ratio']}  "
            f"+{row['p50_added_ms']} ms at p50, +{row['p95_added_ms']} ms at p95, "
            f"rps x{row['rps_ratio']}"
        )
    extra = "".join(f"  {k}={v}" for k, v in row.items() if k.endswith("_p50_ms") and k != "p50_ms")
    return (
        f"  {row['name']:<26} K={row['clients']:<3} {row['rps']:>8.1f} req/s  p50 {row['p50_ms']:>8.1f}  "
        f"p95 {row['p95_ms']:>8.1f}  p99 {row['p99_ms']:>8.1f} ms  errors {row['errors']}"
        f"{extra}{'  ' + json.dumps(row['error_kinds']) if row.get('error_kinds') else ''}"
    )


# ----------------------------------------------------------------------------------------- the stack


def require_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(f"refusing {url!r}: only loopback addresses (127.0.0.1, ::1, localhost) are used")


@contextmanager
def local_stack(root: Path) -> Iterator[tuple[str, str]]:
    """Kafka, PostgreSQL and the six services on free loopback ports, the sample ingested (offline mode)."""
    from devstack.kafka import LocalKafka
    from devstack.postgres import LocalPostgres
    from devstack.processes import SERVICES, ServiceStack

    os.chmod(root, 0o755)
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
    postgres = LocalPostgres(root / "postgres", port=free_port())
    kafka.ensure_libs()
    print(f"starting Kafka and PostgreSQL in {root}", flush=True)
    kafka.start(timeout=120)
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
                "EVIDENTIA_LOG_FORMAT": "json",
                "EVIDENTIA_LOG_LEVEL": "WARNING",
                # One client address makes every request here: the per-address limit would answer 429.
                "EVIDENTIA_GATEWAY_RATE_LIMIT_PER_MINUTE": "0",
            }
        )
        with _env({k: env[k] for k in ("EVIDENTIA_KAFKA_BOOTSTRAP", "EVIDENTIA_DATABASE_URL")}):
            from shared.settings import Settings

            settings = Settings()
            asyncio.run(_prepare(settings))
        services = ServiceStack(log_dir=root / "logs", env=env, ports={n: free_port() for n in SERVICES})
        print("starting the six services", flush=True)
        services.start(timeout=300)
        with _env({k: env[k] for k in ("EVIDENTIA_KAFKA_BOOTSTRAP", "EVIDENTIA_DATABASE_URL")}):
            status = asyncio.run(_ingest(Settings()))
        print(f"sample ingested: {status}", flush=True)
        yield f"http://127.0.0.1:{services.processes['gateway'].port}", postgres.url
    finally:
        if services is not None:
            services.stop()
        kafka.stop()
        postgres.stop()


async def _prepare(settings: Any) -> None:
    from shared.db import migrate
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    await migrate(settings.database.url)
    await ensure_topics(settings.kafka, standard_topics(settings.kafka.topic_partitions))


async def _ingest(settings: Any) -> str:
    from cli.ingest import publish_documents
    from services.fetcher.bulk import iter_jsonl
    from shared.events import DocumentFetched

    job_id = f"bench-{uuid.uuid4().hex[:12]}"
    events = [e for e in iter_jsonl(SAMPLE, job_id=job_id) if isinstance(e, DocumentFetched)]
    status = await publish_documents(settings, list(events), job_id, str(SAMPLE), timeout=900)
    if status is None or not status.done:
        raise SystemExit(f"the sample was not ingested: {status}")
    return f"{status.counts.get('embedded', 0)}/{status.total} documents embedded"


# ----------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("url", nargs="?", default=None, help="Gateway URL (loopback only), e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--start-stack",
        action="store_true",
        help="Start Kafka, PostgreSQL and the services on free ports, ingest the sample, stop them at the end.",
    )
    p.add_argument("--clients", default="8", help="Concurrent clients K, or a list: 1,8 (each at most 64).")
    p.add_argument("--duration", type=float, default=15.0, help="Seconds T per run (at most 300).")
    p.add_argument("--endpoints", default="search,ask", help="Of search,ask.")
    p.add_argument("--top-n", type=int, default=5)
    p.add_argument(
        "--database-url",
        default=None,
        help="Database of the direct in-process search (default: EVIDENTIA_DATABASE_URL); --no-direct skips it.",
    )
    p.add_argument("--no-direct", action="store_true", help="Skip the in-process comparison.")
    p.add_argument("--json", type=Path, default=None, help="Also write the results as JSON here.")
    args = p.parse_args(argv)
    if bool(args.url) == bool(args.start_stack):
        p.error("give the gateway URL or --start-stack (not both)")
    args.clients_list = [int(c) for c in str(args.clients).split(",") if c.strip()]
    if not args.clients_list or any(not 1 <= c <= MAX_CLIENTS for c in args.clients_list):
        p.error(f"--clients: 1..{MAX_CLIENTS}")
    if not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"--duration: 0..{MAX_DURATION_S:.0f} seconds")
    args.endpoint_list = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    if not args.endpoint_list or set(args.endpoint_list) - {"search", "ask"}:
        p.error("--endpoints: search and/or ask")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()

    def go(url: str, database_url: str | None) -> list[dict[str, Any]]:
        require_loopback(url)
        if database_url and not args.no_direct:
            require_loopback("http://" + database_url.split("://", 1)[-1])
        print(
            f"load: {url}  clients {args.clients_list}  {args.duration:.0f}s per run  endpoints {args.endpoint_list}",
            flush=True,
        )
        return asyncio.run(
            run_bench(
                url,
                None if args.no_direct else database_url,
                args.clients_list,
                args.duration,
                args.endpoint_list,
                args.top_n,
            )
        )

    if args.start_stack:
        with (
            tempfile.TemporaryDirectory(prefix="evidentia-load-", ignore_cleanup_errors=True) as tmp,
            local_stack(Path(tmp)) as (url, db),
        ):
            rows = go(url, db)
    else:
        rows = go(args.url, args.database_url or os.environ.get("EVIDENTIA_DATABASE_URL"))
    errors = sum(int(r.get("errors", 0)) for r in rows)
    if ASK_MODES:
        print(f"/v1/ask answer modes: {ASK_MODES}")
    print(f"done in {time.perf_counter() - started:.0f}s; errors: {errors}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "ask_modes": ASK_MODES,
                    "cpus": os.cpu_count(),
                    "load_avg": os.getloadavg(),
                    "at": time.time(),
                },
                indent=2,
            )
        )
    return 1 if errors else 0


__all__ = ["Result", "asdict", "drive", "main", "percentile"]

if __name__ == "__main__":
    sys.exit(main())
