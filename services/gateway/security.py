"""Guards on the ``/v1`` API: API keys, a per-key rate limit, a request body size limit; and CORS.

- API keys: ``Authorization: Bearer <key>``; the gateway keeps only SHA-256 digests of the keys
  (``EVIDENTIA_GATEWAY_API_KEY_HASHES``). No digests configured means authentication is off.
  A missing or unknown key gets 401 with ``WWW-Authenticate: Bearer``.
- Scopes: each digest carries scopes (``read``, ``ingest``, ``admin``; ``<digest>:read+ingest``; a bare
  digest is ``read``). A route that needs more than ``read`` depends on :func:`require`; a key without the
  scope gets 403 with the scope it lacks. With authentication off every scope is granted.
- Rate limit: a token bucket per key (per client address when authentication is off): a steady
  ``rate_limit_per_minute`` with bursts of ``rate_limit_burst``; over it, 429 with ``Retry-After``. With
  ``rate_limit_scope=cluster`` (the default) the bucket is a row in PostgreSQL shared by every gateway replica
  (:class:`SharedRateLimit`), so ten replicas still give a key its limit once, not ten times.
- Body size: a ``Content-Length`` over ``max_body_bytes`` gets 413 before anything is read; a chunked body
  is counted as it is read and cut off at the limit with 413.
- CORS (``EVIDENTIA_GATEWAY_CORS_ORIGINS``) wraps everything, so refusals carry CORS headers too.

The web page (``/``), health probes, metrics and the OpenAPI docs are not guarded.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from fastapi import FastAPI, HTTPException, Request
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.db import rate_buckets
from shared.settings import API_SCOPES, GatewaySettings

GUARDED_PREFIX = "/v1/"
log = logging.getLogger(__name__)
ALL_SCOPES = frozenset(API_SCOPES)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class TokenBucket:
    """Per-identity token buckets (at most ``max_keys`` remembered, least recently used dropped)."""

    def __init__(self, per_minute: float, burst: int, max_keys: int = 10_000):
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, identity: str, now: float | None = None) -> float:
        """0 if allowed (a token taken), else the seconds until one is available."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.pop(identity, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[identity] = (tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return wait


class SharedRateLimit:
    """The per-key limit of the whole deployment: one bucket per key in PostgreSQL (:mod:`shared.db.rate_buckets`,
    ``gateway:<identity>``), taken from by every gateway replica; one statement per request.

    When the database does not answer within :attr:`db_timeout_s` (down, or its pool exhausted), the request is
    limited by this process's own :class:`TokenBucket` instead, and the database is tried again only after
    :attr:`retry_db_after_s`. That is a choice between failing open, closed or local: closed would turn a
    database outage into a refusal of every request, searches and answers included, which need no database;
    open would lift the limit exactly when the system is struggling; local keeps a limit (per replica, so
    at most the replica count times the key's limit) and keeps requests at most ``db_timeout_s`` slower, once
    per ``retry_db_after_s``. ``pool`` returns None until the gateway's pool is open, and always with
    ``rate_limit_scope=process``.
    """

    db_timeout_s = 0.25
    retry_db_after_s = 5.0
    prefix = "gateway:"

    def __init__(
        self,
        settings: GatewaySettings,
        pool: Callable[[], asyncpg.Pool | None] = lambda: None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.rate = settings.rate_limit_per_minute / 60.0
        self.burst = float(settings.rate_limit_burst)
        self.local = TokenBucket(settings.rate_limit_per_minute, settings.rate_limit_burst)
        self._pool = pool if settings.rate_limit_scope == "cluster" else lambda: None
        self._clock = clock
        self._db_down_until = 0.0

    async def take(self, identity: str) -> float:
        """0 if ``identity`` may make a request now (a token taken), else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        pool = self._pool()
        now = self._clock()
        if pool is not None and now >= self._db_down_until:
            try:
                return await asyncio.wait_for(
                    rate_buckets.take(pool, self.prefix + identity, self.rate, self.burst), self.db_timeout_s
                )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                self._db_down_until = now + self.retry_db_after_s
                log.warning(
                    "the shared rate limit is unavailable; limiting by this replica's own buckets for %.0f s: %r",
                    self.retry_db_after_s,
                    exc,
                )
        return self.local.take(identity, now)

    def idle_s(self) -> float:
        """How long a bucket must be untouched to be full again (as good as absent), with a margin."""
        return self.burst / self.rate + 60.0 if self.rate > 0 else 60.0

    async def prune(self) -> int:
        """Delete the gateway's buckets that are full again (keys and addresses not seen for a while)."""
        pool = self._pool()
        return 0 if pool is None else await rate_buckets.prune(pool, self.prefix, self.idle_s())


class ApiGuard:
    """Pure ASGI middleware (streaming responses pass through untouched)."""

    def __init__(self, app: ASGIApp, settings: GatewaySettings, rate_limit: SharedRateLimit | None = None):
        self.app = app
        self.scopes = settings.key_scopes()
        self.hashes = frozenset(self.scopes)
        self.max_body = settings.max_body_bytes
        self.rate_limit = rate_limit or SharedRateLimit(settings)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.hashes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(GUARDED_PREFIX):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        identity = self._identify(headers)
        if identity is None:
            await _refuse(
                send,
                401,
                "missing or invalid API key: send `Authorization: Bearer <key>`",
                {"www-authenticate": 'Bearer realm="evidentia"'},
            )
            return
        if identity == "":
            client = scope.get("client")
            identity = f"addr:{client[0] if client else 'unknown'}"
        wait = await self.rate_limit.take(identity)
        if wait > 0:
            await _refuse(
                send,
                429,
                f"rate limit exceeded; retry in {math.ceil(wait)} s",
                {"retry-after": str(max(1, math.ceil(wait)))},
            )
            return
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await _refuse(send, 413, f"request body over {self.max_body} bytes")
            return
        state = scope.setdefault("state", {})
        state["api_key_id"] = identity if identity.startswith("key:") else None
        state["api_scopes"] = self._granted(headers) if self.hashes else ALL_SCOPES

        received = 0
        started = False
        refused = False

        async def limited_receive() -> Message:
            nonlocal received, started, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:  # a chunked body: refuse it here, and stop the app reading
                    refused = True
                    if not started:
                        started = True
                        await _refuse(send, 413, f"request body over {self.max_body} bytes")
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out already; whatever the app says next is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, tracking_send)

    def _identify(self, headers: dict[str, str]) -> str | None:
        """``key:<digest prefix>`` for a valid key, "" when auth is off, None when refused."""
        if not self.hashes:
            return ""
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = key_digest(token.strip())
        ok = False
        for h in self.hashes:  # compare against every digest, in constant time each
            ok |= hmac.compare_digest(digest, h)
        return f"key:{digest[:16]}" if ok else None

    def _granted(self, headers: dict[str, str]) -> frozenset[str]:
        token = headers.get("authorization", "").partition(" ")[2].strip()
        return self.scopes.get(key_digest(token), frozenset())


def require(scope: str) -> Callable[[Request], Awaitable[None]]:
    """A route dependency: 403 unless the caller's key has ``scope`` (every scope when auth is off)."""
    if scope not in ALL_SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    async def check(request: Request) -> None:
        granted: frozenset[str] = request.scope.get("state", {}).get("api_scopes", frozenset())
        if scope not in granted:
            raise HTTPException(
                403,
                f"this API key lacks the `{scope}` scope (it has: {', '.join(sorted(granted)) or 'none'}); "
                f"grant it in EVIDENTIA_GATEWAY_API_KEY_HASHES as `<digest>:{scope}`",
            )

    return check


async def _refuse(send: Send, status: int, detail: str, extra: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ExposureRefused(RuntimeError):
    """The gateway would serve every ``/v1`` route without authentication beyond this host."""


def is_loopback(host: str) -> bool:
    """True for an address only this host can reach (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_exposure(host: str, settings: GatewaySettings) -> None:
    """Refuse to listen on a non-loopback ``host`` with authentication off, unless anonymity is explicit.

    Raises :class:`ExposureRefused` (the gateway's ``__main__`` exits with its message) when no API key
    hashes are configured, ``host`` is not a loopback address and ``allow_anonymous`` is not set.
    """
    if settings.key_hashes() or is_loopback(host):
        return
    if settings.allow_anonymous:
        log.warning("authentication is OFF on a non-loopback address (EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS)")
        return
    raise ExposureRefused(
        f"refusing to listen on {host} with authentication off: anyone who can reach it could use every /v1 "
        "route. Set EVIDENTIA_GATEWAY_API_KEY_HASHES (SHA-256 digests of the API keys: "
        'printf %s "$KEY" | sha256sum), listen on 127.0.0.1 (EVIDENTIA_GATEWAY_HOST), or set '
        "EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS=true to serve it open on purpose."
    )


def install(app: FastAPI, settings: GatewaySettings, rate_limit: SharedRateLimit | None = None) -> None:
    """Add the guard, then CORS around it (the last middleware added is the outermost). Without ``rate_limit``
    the guard limits by this process's own buckets."""
    app.add_middleware(ApiGuard, settings=settings, rate_limit=rate_limit)
    origins = settings.origins()
    if origins:
        kwargs: dict[str, Any] = {
            "allow_origins": origins,
            "allow_methods": ["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
            "allow_headers": ["Authorization", "Content-Type"],
            "expose_headers": ["Retry-After", "X-Trace-Id", "traceparent", "X-Error-Id"],
            "max_age": 600,
        }
        app.add_middleware(CORSMiddleware, **kwargs)
