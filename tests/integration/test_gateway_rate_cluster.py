"""Issue #40 item 4: one API key's rate limit holds across gateway replicas (a bucket per key in PostgreSQL).

Two gateway processes on the session's Kafka and PostgreSQL, one key allowed a burst of 3 and 1 request a
minute: requests spread over both replicas get 3 through in all, not 3 from each (a dict per process, before).
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from services.gateway.security import key_digest
from tests.integration.conftest import Infra
from tests.integration.gateways import infra_gateway

pytestmark = [pytest.mark.integration]

BURST = 3


def test_two_gateways_share_one_rate_limit_per_key(infra: Infra) -> None:
    key = f"rate-{uuid.uuid4().hex}"
    env = {
        "EVIDENTIA_GATEWAY_API_KEY_HASHES": key_digest(key),
        "EVIDENTIA_GATEWAY_RATE_LIMIT_PER_MINUTE": "1",
        "EVIDENTIA_GATEWAY_RATE_LIMIT_BURST": str(BURST),
    }
    headers = {"Authorization": f"Bearer {key}"}
    with infra_gateway(infra, "rate-a", env) as a, infra_gateway(infra, "rate-b", env) as b:
        statuses: list[tuple[str, int]] = []
        for n in range(4 * BURST):
            base = (a, b)[n % 2]
            r = httpx.get(f"{base}/v1/ingest/no-such-job", headers=headers, timeout=30)
            statuses.append((base, r.status_code))
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1
        passed = [(base, code) for base, code in statuses if code != 429]
        assert len(passed) == BURST, statuses  # one bucket for the key: per process, each would pass BURST
        assert {base for base, _ in passed} == {a, b}  # both replicas served some: the bucket is shared
        # Another key has its own bucket.
        other = httpx.get(f"{a}/v1/ingest/no-such-job", timeout=30)
        assert other.status_code == 401  # (no key) the guard still answers first
