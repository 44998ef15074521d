"""Bounded work per request through the running services: the issue's 10,000-character query.

It gets a prompt 422 from the gateway (it never reaches the retriever or PostgreSQL), and searches sent
at the same time keep their latency.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LONG_QUERY = ("aspirin reduces the risk of stroke in patients with atrial fibrillation " * 150)[:10_000]
QUERIES = [
    "aspirin and stroke prevention",
    "treatment of AIDS in correctional facilities",
    "mammography screening in HMO women",
    "insulin resistance during pregnancy",
]


@pytest.fixture(scope="module")
def ingested(stack: Stack) -> None:
    with stack.http() as http:
        job = http.post("/v1/ingest", json={"pmids": stack.fake.pubmed_ids}).json()["job_id"]
    assert stack.wait_job(job)["done"]


def _search(base: str, query: str) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    with httpx.Client(base_url=base, timeout=60) as http:
        r = http.post("/v1/search", json={"query": query, "mode": "hybrid", "top_n": 5})
    return r.status_code, time.perf_counter() - t0, r.text


def test_a_10000_character_query_gets_a_prompt_422_while_other_searches_keep_their_latency(
    stack: Stack, ingested: None
) -> None:
    base = stack.gateway
    for q in QUERIES:  # warm: models loaded, plans cached
        assert _search(base, q)[0] == 200
    with ThreadPoolExecutor(max_workers=12) as pool:  # the same searches at once, nothing else
        quiet = [f.result() for f in [pool.submit(_search, base, q) for q in QUERIES * 2]]
    assert all(s == 200 for s, _, _ in quiet), quiet
    baseline = [t for _, t, _ in quiet]

    with ThreadPoolExecutor(max_workers=12) as pool:  # again, next to four 10,000-character queries
        longs = [pool.submit(_search, base, LONG_QUERY) for _ in range(4)]
        others = [pool.submit(_search, base, q) for q in QUERIES * 2]
        long_results = [f.result() for f in longs]
        other_results = [f.result() for f in others]

    for status, took, text in long_results:
        assert status == 422, text
        assert "EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS" in text
        assert took < 5.0, took
    assert all(s == 200 for s, _, _ in other_results), other_results
    during = [t for _, t, _ in other_results]
    # Their median stays close to the quiet one (a long query run whole holds them up for seconds to
    # tens of seconds on a large store: the lexical query over 1,500 terms).
    assert statistics.median(during) <= 2 * statistics.median(baseline) + 1.0, (baseline, during)
