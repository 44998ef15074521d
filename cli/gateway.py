"""The CLI's client of the gateway: where it is, the API key sent on every call, and errors a person can read.

Every gateway command goes through :class:`GatewayClient`:

- the base URL is ``--gateway-url``, else ``EVIDENTIA_GATEWAY_URL`` (the setting ``service.gateway_url``);
- the API key is ``--api-key``, else ``EVIDENTIA_API_KEY``; it is sent as ``Authorization: Bearer <key>``;
- a 429 is waited out as the gateway asks (``Retry-After``, seconds or an HTTP date), within a bounded number of
  tries and never past the caller's deadline; polling backs off while nothing changes (:class:`Backoff`);
- a gateway that cannot be reached, refuses the key, refuses the request or fails raises :class:`GatewayError`
  with one readable line and the exit status that says which (:mod:`cli.exits`), never a traceback.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from httpx_sse import EventSource, ServerSentEvent, connect_sse

from cli import exits
from cli.version import cli_version
from shared.http_retry import RetryableResponse, RetryWait, retry_sync

API_KEY_ENV = "EVIDENTIA_API_KEY"

T = TypeVar("T")


class GatewayError(Exception):
    """A gateway call that did not succeed: ``message`` for a person, ``exit_code`` for a script."""

    def __init__(self, message: str, exit_code: int, status: int | None = None, detail: Any = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.detail = detail

    def as_json(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status, "exit_code": self.exit_code, "detail": self.detail}


def _detail(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text.strip()[:500] or None
    return body.get("detail", body) if isinstance(body, dict) else body


def _detail_text(detail: Any) -> str:
    if detail is None:
        return ""
    if isinstance(detail, list):  # FastAPI's 422: [{"loc": [...], "msg": ...}, ...]
        parts = []
        for d in detail:
            if isinstance(d, dict):
                loc = ".".join(str(x) for x in d.get("loc", []) if x != "body")
                parts.append(f"{loc}: {d.get('msg')}" if loc else str(d.get("msg")))
            else:
                parts.append(str(d))
        return "; ".join(parts)
    return str(detail)


def error_for(response: httpx.Response, what: str) -> GatewayError:
    """The :class:`GatewayError` a non-2xx answer means."""
    status = response.status_code
    detail = _detail(response)
    text = _detail_text(detail)
    if status == 401:
        hint = (
            "no API key was sent: pass --api-key or set EVIDENTIA_API_KEY"
            if "authorization" not in {k.lower() for k in response.request.headers}
            else "the gateway does not accept this API key"
        )
        return GatewayError(f"{what}: refused (401): {hint}", exits.NOPERM, status, detail)
    if status == 403:
        return GatewayError(f"{what}: forbidden (403): {text}", exits.NOPERM, status, detail)
    if status == 429:
        return GatewayError(f"{what}: rate limited (429) and out of retries: {text}", exits.TEMPFAIL, status, detail)
    if status == 404:
        return GatewayError(f"{what}: not found (404): {text}", exits.NOINPUT, status, detail)
    if status in (502, 503, 504):
        message = f"{what}: the gateway is up but cannot answer ({status}): {text}"
        return GatewayError(message, exits.UNAVAILABLE, status, detail)
    if status >= 500:
        return GatewayError(f"{what}: the gateway failed ({status}): {text}", exits.SOFTWARE, status, detail)
    return GatewayError(f"{what}: rejected ({status}): {text}", exits.DATAERR, status, detail)


def unreachable(exc: httpx.HTTPError, base_url: str, what: str) -> GatewayError:
    if isinstance(exc, httpx.TimeoutException):
        return GatewayError(f"{what}: the gateway at {base_url} did not answer in time ({exc!r})", exits.TEMPFAIL)
    reason = str(exc) or type(exc).__name__
    return GatewayError(
        f"{what}: cannot reach the gateway at {base_url} ({reason}); is it running? "
        "(--gateway-url or EVIDENTIA_GATEWAY_URL)",
        exits.UNAVAILABLE,
    )


@dataclass
class Backoff:
    """Polling intervals: ``initial``, growing by ``factor`` up to ``maximum`` while nothing changes."""

    initial: float = 1.0
    factor: float = 1.5
    maximum: float = 10.0
    current: float = field(init=False)

    def __post_init__(self) -> None:
        self.current = self.initial

    def reset(self) -> None:
        self.current = self.initial

    def next(self) -> float:
        value = self.current
        self.current = min(self.maximum, self.current * self.factor)
        return value


Notify = Callable[[str], None]


#: Idle seconds after which the client drops a kept-alive connection: below the gateway's (uvicorn's default
#: ``timeout_keep_alive``, 5 s). With both at 5 s, a request sent after a ~5 s wait (a 429's Retry-After, a job
#: poll) could go out on a connection the server was closing that instant and fail with a connection reset.
KEEPALIVE_EXPIRY_S = 2.0


def _rate_limited(response: httpx.Response) -> RetryableResponse:
    """A 429 to wait out as its ``Retry-After`` says."""
    return RetryableResponse.from_headers("HTTP 429", response.headers, status=429, response=response)


class GatewayClient:
    """A synchronous httpx client of the gateway, with the key, retries on 429 and readable errors."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_429_retries: int = 8,
        max_retry_wait: float = 60.0,
        notify: Notify | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        jitter: float = 0.5,
    ):
        headers = {"User-Agent": f"evidentia-cli/{cli_version()}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = base_url.rstrip("/")
        self.max_429_retries = max_429_retries
        self.max_retry_wait = max_retry_wait
        self.notify = notify or (lambda _msg: None)
        self.sleep = sleep
        self.jitter = jitter
        self._random = random.Random()
        self.rate_limited = 0  # 429s waited out, for the summary
        self.http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            headers=headers,
            transport=transport,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _retry_429(self, attempt: Callable[[], T], deadline: float | None, what: str) -> T:
        """``attempt()``, made again as a 429 asks (it raises :class:`RetryableResponse` for one).

        With a ``deadline`` (a command that follows a job) a 429 is waited out until the deadline; without
        one, at most ``max_429_retries`` times. The wait is ``Retry-After``, or 1, 2, 4... s for the
        consecutive refusals if longer, plus up to ``jitter`` of it again at random, so clients refused
        together do not all come back at once; at most ``max_retry_wait`` unless the gateway asks for more.
        When the tries or the time run out, the last :class:`RetryableResponse` is raised."""

        def before_wait(retry: int, failure: RetryableResponse, wait: float) -> None:
            self.rate_limited += 1
            self.notify(f"{what}: rate limited by the gateway (429); retrying in {wait:.1f} s")

        wait = RetryWait(
            backoff=lambda n: 2.0 ** min(n, 10),  # refused again and again: come back ever later
            jitter=self.jitter,
            max_wait_s=self.max_retry_wait,
            rng=self._random,
        )
        return retry_sync(
            attempt,
            wait=wait,
            sleep=self.sleep,
            max_attempts=None if deadline is not None else self.max_429_retries + 1,
            deadline=deadline,
            before_wait=before_wait,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        what: str | None = None,
        deadline: float | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> httpx.Response:
        """One call; a 429 is retried after ``Retry-After``; any other non-``ok`` status raises."""
        what = what or f"{method} {path}"

        def attempt() -> httpx.Response:
            try:
                response = self.http.request(method, path, json=json_body)
            except httpx.HTTPError as exc:
                raise unreachable(exc, self.base_url, what) from None
            if response.status_code == 429:
                raise _rate_limited(response)
            if response.status_code not in ok:
                raise error_for(response, what)
            return response

        try:
            return self._retry_429(attempt, deadline, what)
        except RetryableResponse as refused:
            raise error_for(refused.response, what) from None

    def get_json(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw).json()

    def post_json(self, path: str, body: dict[str, Any], **kw: Any) -> Any:
        return self.request("POST", path, json_body=body, **kw).json()

    @contextmanager
    def _sse(self, path: str, body: dict[str, Any], what: str, timeout: float) -> Iterator[Iterator[ServerSentEvent]]:
        def attempt() -> tuple[ExitStack, EventSource]:
            """An open stream answered 200, or the error its response is (a 429 to retry)."""
            opened = ExitStack()
            try:
                source = opened.enter_context(connect_sse(self.http, "POST", path, json=body, timeout=timeout))
                response = source.response
                if response.status_code != 200:
                    response.read()
                    raise _rate_limited(response) if response.status_code == 429 else error_for(response, what)
            except BaseException:
                opened.close()
                raise
            return opened, source

        try:
            opened, source = self._retry_429(attempt, None, what)
        except RetryableResponse as refused:
            raise error_for(refused.response, what) from None
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.base_url, what) from None
        with opened:
            try:
                yield source.iter_sse()
            except httpx.HTTPError as exc:
                raise unreachable(exc, self.base_url, what) from None

    def stream_events(
        self, path: str, body: dict[str, Any], what: str, timeout: float = 600.0
    ) -> Iterator[tuple[str, Any]]:
        """POST ``body`` to a server-sent-events route; yields ``(event, data)``; ``error`` events raise."""
        with self._sse(path, body, what, timeout) as events:
            for sse in events:
                data = json.loads(sse.data) if sse.data else None
                if sse.event == "error":
                    data = data or {}
                    status = data.get("status")
                    code = exits.SOFTWARE
                    if status in (502, 503, 504):
                        code = exits.UNAVAILABLE
                    elif isinstance(status, int) and 400 <= status < 500:
                        code = exits.DATAERR
                    raise GatewayError(
                        f"{what}: failed while streaming ({status}): {data.get('message')}", code, status, data
                    )
                yield sse.event, data


def client_from_args(args: Any, *, timeout: float = 120.0, notify: Notify | None = None) -> GatewayClient:
    """The client for the global options ``--gateway-url`` and ``--api-key`` (or their environment variables)."""
    url = getattr(args, "gateway_url", None)
    if not url:
        from shared.settings import ServiceSettings

        url = ServiceSettings().gateway_url
    key = getattr(args, "api_key", None) or os.environ.get(API_KEY_ENV) or None
    return GatewayClient(url, key, timeout=timeout, notify=notify)
