"""API keys, rate limit, body size limit and CORS on the gateway's /v1 routes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from services.gateway.security import TokenBucket, key_digest
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
