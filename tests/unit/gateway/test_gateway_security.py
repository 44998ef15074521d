"""API keys, rate limit, body size limit and CORS on the gateway's /v1 routes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from services.gateway.security import SharedRateLimit, TokenBucket, key_digest
from shared.settings import GatewaySettings
from tests.unit.gateway.conftest import build_app, client

KEY_A, KEY_B = "alpha-key-1234567890", "bravo-key-0987654321"


def guarded(**kw: object) -> GatewaySettings:
    return GatewaySettings(api_key_hashes=f"{key_digest(KEY_A)}, {key_digest(KEY_B).upper()}", **kw)  # type: ignore[arg-type]


async def test_without_configured_keys_auth_is_off() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        r = await http.post("/v1/ask", json={"question": "Does counseling help screening?"})
    assert r.status_code == 200


async def test_keys_are_required_and_checked_against_their_hashes() -> None:
    app, _, _ = build_app(gateway=guarded())
    async with (
        client(app) as anon,
        client(app, "wrong-key") as wrong,
        client(app, KEY_A) as a,
        client(app, KEY_B) as b,
    ):
        r = await anon.post("/v1/ask", json={"question": "Does counseling help screening?"})
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert "API key" in r.json()["detail"]
        assert (await wrong.get("/v1/conversations/x")).status_code == 401
        assert (await anon.get("/v1/ingest/x")).status_code == 401
        r = await anon.post("/v1/ask", headers={"Authorization": f"Basic {KEY_A}"}, json={"question": "q"})
        assert r.status_code == 401
        # Open routes: the page, probes, docs.
        for path in ("/", "/healthz", "/openapi.json"):
            assert (await anon.get(path)).status_code == 200, path
        ok = await a.post("/v1/ask", json={"question": "Does counseling help screening?"})
        assert ok.status_code == 200
        cid = ok.json()["conversation_id"]
        # A conversation belongs to the key that started it.
        assert (await a.get(f"/v1/conversations/{cid}")).status_code == 200
        assert (await b.get(f"/v1/conversations/{cid}")).status_code == 404
        r = await b.post("/v1/ask", json={"question": "and then?", "conversation_id": cid})
        assert r.status_code == 404


async def test_rate_limit_per_key_answers_429_with_retry_after() -> None:
    app, _, _ = build_app(gateway=guarded(rate_limit_per_minute=6, rate_limit_burst=2))
    async with client(app, KEY_A) as a, client(app, KEY_B) as b:
        codes = [(await a.get("/v1/conversations/none")).status_code for _ in range(3)]
        assert codes == [404, 404, 429]
        r = await a.get("/v1/conversations/none")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert (await b.get("/v1/conversations/none")).status_code == 404  # another key, its own bucket


def test_token_bucket_refills_at_the_steady_rate() -> None:
    bucket = TokenBucket(per_minute=60, burst=2)
    assert bucket.take("k", now=0.0) == 0 and bucket.take("k", now=0.0) == 0
    assert bucket.take("k", now=0.0) == 1.0
    assert bucket.take("k", now=0.5) > 0
    assert bucket.take("k", now=1.6) == 0
    assert TokenBucket(per_minute=0, burst=1).take("k") == 0  # 0 disables the limit


async def test_request_bodies_over_the_limit_get_413() -> None:
    app, _, _ = build_app(gateway=GatewaySettings(max_body_bytes=2048))  # type: ignore[call-arg]
    async with client(app) as http:
        r = await http.post("/v1/ask", json={"question": "x" * 5000})
        assert r.status_code == 413 and "2048" in r.json()["detail"]

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 500

        r = await http.post("/v1/ingest", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = await http.post("/v1/ask", json={"question": "Does counseling help screening?"})
        assert r.status_code == 200


async def test_cors_is_a_setting() -> None:
    app, _, _ = build_app(gateway=guarded(cors_origins="https://app.example.org"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        pre = await http.options(
            "/v1/ask",
            headers={
                "Origin": "https://app.example.org",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://app.example.org"
        denied = await http.post("/v1/ask", json={"question": "q"}, headers={"Origin": "https://app.example.org"})
        assert denied.status_code == 401  # refusals carry CORS headers, so the browser can read them
        assert denied.headers["access-control-allow-origin"] == "https://app.example.org"
        other = await http.options(
            "/v1/ask", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in other.headers
    plain, _, _ = build_app()
    async with client(plain) as http:
        r = await http.get("/healthz", headers={"Origin": "https://app.example.org"})
        assert "access-control-allow-origin" not in r.headers


class HangingPool:
    """A database that never answers (a hung primary, or a pool with no free connection)."""

    def __init__(self) -> None:
        self.calls = 0

    async def fetchrow(self, *args: object) -> None:
        self.calls += 1
        await asyncio.sleep(3600)


class RefusingPool(HangingPool):
    async def fetchrow(self, *args: object) -> None:
        self.calls += 1
        raise ConnectionRefusedError("the database is down")


@pytest.mark.parametrize("pool", [HangingPool(), RefusingPool()], ids=["hanging", "refusing"])
async def test_shared_rate_limit_falls_back_to_this_replicas_buckets_without_the_database(pool: HangingPool) -> None:
    # Issue #40 item 4: the cluster-wide limit lives in PostgreSQL; without it the limit still holds (per replica),
    # requests are not refused wholesale nor let through unlimited, and each waits at most db_timeout_s once.
    now = [0.0]
    settings = GatewaySettings(rate_limit_per_minute=6, rate_limit_burst=2)  # type: ignore[call-arg]
    limit = SharedRateLimit(settings, lambda: pool, clock=lambda: now[0])  # type: ignore[arg-type, return-value]
    limit.db_timeout_s = 0.05
    started = time.perf_counter()
    waits = [await limit.take("key:a") for _ in range(3)]
    assert waits[:2] == [0.0, 0.0] and waits[2] > 0  # limited by the local bucket
    assert pool.calls == 1  # the database was tried once, then left alone for retry_db_after_s
    assert time.perf_counter() - started < 1.0
    now[0] = limit.retry_db_after_s + 0.1
    await limit.take("key:a")
    assert pool.calls == 2  # tried again after the pause


async def test_process_scope_never_asks_the_database() -> None:
    pool = RefusingPool()
    settings = GatewaySettings(rate_limit_per_minute=6, rate_limit_burst=1, rate_limit_scope="process")  # type: ignore[call-arg]
    limit = SharedRateLimit(settings, lambda: pool)  # type: ignore[arg-type, return-value]
    assert await limit.take("key:a") == 0.0 and await limit.take("key:a") > 0
    assert pool.calls == 0
