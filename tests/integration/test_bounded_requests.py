"""Bounded work per request through the running services: the issue's 10,000-character query.

It gets a 422 from the gateway (it never reaches the retriever or PostgreSQL), and searches sent at the
same time are served.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.conftest import Stack
from tests.integration.gateways import gateway_counter

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


def _search(base: str, query: str) -> tuple[int, str]:
    with httpx.Client(base_url=base, timeout=60) as http:
        r = http.post("/v1/search", json={"query": query, "mode": "hybrid", "top_n": 5})
    return r.status_code, r.text


def test_a_10000_character_query_gets_a_422_and_never_reaches_the_retriever_while_other_searches_are_served(
    stack: Stack, ingested: None
) -> None:
    """No clock here (latency is a benchmark's business: bench/load.py); what is asserted is where the work went."""
    base = stack.gateway
    refused = ("evidentia_http_requests_total", 'route="/v1/search"', 'status="422"')
    retrievals = ("evidentia_request_reply_seconds_count", "retrieval.requests")
    before_422, before_retrievals = gateway_counter(base, *refused), gateway_counter(base, *retrievals)

    with ThreadPoolExecutor(max_workers=12) as pool:  # ordinary searches next to four 10,000-character queries
        longs = [pool.submit(_search, base, LONG_QUERY) for _ in range(4)]
        others = [pool.submit(_search, base, q) for q in QUERIES * 2]
        long_results = [f.result() for f in longs]
        other_results = [f.result() for f in others]

    for status, text in long_results:
        assert status == 422, text
        assert "EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS" in text
    assert all(s == 200 for s, _ in other_results), other_results
    assert gateway_counter(base, *refused) - before_422 == 4
    # every retrieval round trip was an ordinary search's: none was the long query's
    assert 0 < gateway_counter(base, *retrievals) - before_retrievals <= len(QUERIES) * 2
