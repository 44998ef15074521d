"""Issue #16 item 5: three fetcher processes share one NCBI rate limit (a token bucket in PostgreSQL).

The fake E-utilities server enforces NCBI's 3 requests/s (more than 3 calls inside any one second: HTTP
429). Three processes built like the fetcher service, each making its calls as fast as its limiter lets
it, together get no 429. The control run with a bucket per process (what each replica had before) does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.eutils_server import FakeEutils
from tests.integration.conftest import Infra

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def strict_ncbi() -> Iterator[FakeEutils]:
    with FakeEutils() as fake:
        fake.rate_limit_per_s = 3
        yield fake


def run_fetchers(
    infra: Infra, fake: FakeEutils, scope: str, calls: int, n: int = 3
) -> tuple[list[dict[str, int]], float]:
    env = (
        dict(os.environ)
        | infra.env
        | {
            "EVIDENTIA_EUTILS_BASE_URL": fake.url,
            "EVIDENTIA_NCBI_RATE_SCOPE": scope,
            "EVIDENTIA_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.pop("EVIDENTIA_NCBI_API_KEY", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.ncbi_worker", str(calls)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:  # every process started (imports, database pool) before any call
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", f"worker did not start: {line!r}"
        fake.clear_requests()
        start = time.monotonic()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results, time.monotonic() - start
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_three_fetchers_share_one_ncbi_rate_limit(infra: Infra, strict_ncbi: FakeEutils) -> None:
    results, took = run_fetchers(infra, strict_ncbi, "cluster", calls=6)
    statuses = [r.status for r in strict_ncbi.requests_to("esearch")]
    assert len(statuses) == 18
    assert statuses.count(429) == 0, f"rate-limited: {statuses}"
    assert all(r == {"ok": 6, "failed": 0} for r in results)
    assert took >= 17 / 3, "18 calls at 3/s for the whole cluster take at least ~5.7 s"


def test_a_bucket_per_process_is_what_broke_the_limit(infra: Infra, strict_ncbi: FakeEutils) -> None:
    """The control: with one bucket per replica the same three processes send ~9 calls a second."""
    results, _ = run_fetchers(infra, strict_ncbi, "process", calls=6)
    statuses = [r.status for r in strict_ncbi.requests_to("esearch")]
    assert statuses.count(429) > 0
    assert sum(r["failed"] for r in results) == statuses.count(429)
