"""The CLI's gateway client: the key on every call, 429 waited out as Retry-After says, readable errors and
exit statuses, polling that backs off while a job stands still."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest

from cli import exits
from cli._common import follow_job
from cli.gateway import Backoff, GatewayClient, GatewayError
from cli.ingest import JobPoller
from cli.main import build_parser, main
from shared.db.jobs import JobStatus


def _client(handler: Any, key: str | None = "k-123", **kw: Any) -> tuple[GatewayClient, list[float]]:
    slept: list[float] = []
    gw = GatewayClient(
        "http://gateway",
        key,
        transport=httpx.MockTransport(handler),
        sleep=slept.append,
        max_retry_wait=60,
        jitter=0.0,
        **kw,
    )
    return gw, slept


def test_429_is_retried_after_the_wait_the_gateway_asks_for_with_the_key_every_time() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if len(seen) < 3:
            return httpx.Response(429, headers={"Retry-After": str(len(seen) * 2)}, json={"detail": "slow down"})
        return httpx.Response(200, json={"ok": True})

    gw, slept = _client(handler)
    assert gw.get_json("/v1/ingest/j") == {"ok": True}
    assert slept == [2.0, 4.0]
    assert seen == ["Bearer k-123"] * 3
    assert gw.rate_limited == 2


def test_429_without_retry_after_backs_off_exponentially_then_gives_up_with_tempfail() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"detail": "rate limit exceeded"})

    gw, slept = _client(handler, max_429_retries=4)
    with pytest.raises(GatewayError) as err:
        gw.get_json("/v1/ingest/j")
    assert slept == [1.0, 2.0, 4.0, 8.0]
    assert err.value.exit_code == exits.TEMPFAIL
    assert "rate limited (429)" in err.value.message


def test_a_wait_past_the_deadline_is_not_slept_through() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "50"}, json={"detail": "x"})

    gw, slept = _client(handler)
    with pytest.raises(GatewayError) as err:
        gw.get_json("/x", deadline=time.monotonic() + 5)
    assert slept == [] and err.value.status == 429


def test_with_a_deadline_429s_are_waited_out_past_the_retry_count_and_with_jitter() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls <= 12:
            return httpx.Response(429, headers={"Retry-After": "2"}, json={"detail": "x"})
        return httpx.Response(200, json={})

    gw, slept = _client(handler, max_429_retries=3)
    gw.jitter = 0.5
    gw.get_json("/x", deadline=time.monotonic() + 3600)
    assert len(slept) == 12
    assert all(s >= 2.0 for s in slept) and len(set(slept)) > 1  # spread, never under Retry-After
    assert 2.0 <= slept[0] <= 3.0 and slept[5] >= 32.0 and max(slept) <= 60.0  # backs off, capped


@pytest.mark.parametrize(
    ("status", "body", "code", "words"),
    [
        (401, {"detail": "missing or invalid API key"}, exits.NOPERM, "does not accept this API key"),
        (404, {"detail": "no ingestion job j"}, exits.NOINPUT, "no ingestion job j"),
        (
            422,
            {"detail": [{"loc": ["body", "top_n"], "msg": "Input should be less than 100"}]},
            exits.DATAERR,
            "top_n: Input should be less than 100",
        ),
        (503, {"detail": "message broker unavailable"}, exits.UNAVAILABLE, "cannot answer (503)"),
        (500, "Internal Server Error", exits.SOFTWARE, "failed (500)"),
    ],
)
def test_refusals_become_one_readable_line_and_an_exit_status(status: int, body: Any, code: int, words: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)

    gw, _ = _client(handler)
    with pytest.raises(GatewayError) as err:
        gw.post_json("/v1/search", {"query": "q"}, what="search")
    assert err.value.exit_code == code
    assert words in err.value.message and err.value.message.startswith("search: ")
    assert "\n" not in err.value.message


def test_a_401_without_a_key_says_how_to_send_one() -> None:
    gw, _ = _client(lambda r: httpx.Response(401, json={"detail": "missing"}), key=None)
    with pytest.raises(GatewayError) as err:
        gw.get_json("/v1/ingest/j")
    assert "--api-key" in err.value.message and "EVIDENTIA_API_KEY" in err.value.message


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stopped_gateway_is_exit_69_with_a_readable_line_and_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    for argv in (["search", "aspirin"], ["ask", "aspirin?"], ["ingest", "--pmids", "1", "--no-wait"]):
        assert main(["--gateway-url", url, *argv]) == exits.UNAVAILABLE
        err = capsys.readouterr().err
        assert err.startswith("evidentia: error: ") and "cannot reach the gateway at " + url in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main([*["search", "aspirin", "--json"], "--gateway-url", url]) == exits.UNAVAILABLE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert '"exit_code": 69' in captured.err


def test_global_options_reach_every_command_before_or_after_it() -> None:
    parser = build_parser()
    for argv in (
        ["--json", "--gateway-url", "http://g:1", "--api-key", "K", "search", "q"],
        ["search", "q", "--json", "--gateway-url", "http://g:1", "--api-key", "K"],
    ):
        args = parser.parse_args(argv)
        assert (args.json, args.gateway_url, args.api_key) == (True, "http://g:1", "K")
    for command in (["settings"], ["db", "status"], ["topics", "list"], ["models", "list"], ["parse", "f"]):
        assert parser.parse_args([*command, "--json"]).json is True
    assert parser.parse_args(["search", "q"]).json is False


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("evidentia ") and out.strip() != "evidentia"


def test_backoff_grows_to_its_cap_and_resets() -> None:
    b = Backoff(initial=1.0, factor=2.0, maximum=5.0)
    assert [b.next() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    b.reset()
    assert b.next() == 1.0


def _status(embedded: int, done: bool) -> JobStatus:
    return JobStatus(
        job_id="j", kind="pmids", state="discovered" if done else "running", total=2, counts={"embedded": embedded}
    )


async def test_polling_backs_off_while_a_job_stands_still_and_speeds_up_when_it_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(round(s, 3))

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    timeline = [_status(0, False)] * 5 + [_status(1, False)] * 2 + [_status(2, True)]

    async def fetch() -> JobStatus:
        return timeline.pop(0)

    status = await follow_job(fetch, "j", timeout=3600, backoff=Backoff(1.0, 2.0, 8.0), show=False)
    assert status.done
    # stands still: 1, 2, 4, 8, 8; moves: back to 1, then 2
    assert slept == [1.0, 2.0, 4.0, 8.0, 8.0, 1.0, 2.0]


def test_idle_connections_are_dropped_before_the_gateway_closes_them() -> None:
    # A request after a ~5 s wait (Retry-After, a job poll) must not reuse a connection the gateway's server
    # (uvicorn, keep-alive 5 s by default) is closing at that moment: that surfaced as "connection reset".
    import uvicorn

    from cli.gateway import KEEPALIVE_EXPIRY_S, GatewayClient

    assert uvicorn.Config(app=lambda *a: None).timeout_keep_alive > KEEPALIVE_EXPIRY_S
    with GatewayClient("http://127.0.0.1:9") as client:
        pool = client.http._transport._pool  # type: ignore[attr-defined]  # httpx's connection pool
        assert pool._keepalive_expiry == KEEPALIVE_EXPIRY_S


def _poller(statuses: list[int], outage_s: float) -> tuple[JobPoller, list[int]]:
    served: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = statuses.pop(0) if statuses else 200
        served.append(status)
        if status != 200:
            return httpx.Response(status, json={"detail": "restarting"})
        return httpx.Response(200, json={"job_id": "j", "kind": "pmids", "state": "discovered", "total": 1})

    gw, _ = _client(handler)
    return JobPoller(gw, "j", deadline=time.monotonic() + 3600, outage_s=outage_s), served


async def test_a_gateway_outage_is_polled_through_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    poller, served = _poller([503, 502, 504, 503], outage_s=600)
    status = await poller()
    assert status is not None and status.job_id == "j"
    assert served == [503, 502, 504, 503, 200] and poller.polls == 5
    assert slept == [1.0, 2.0, 4.0, 8.0]


async def test_an_outage_longer_than_allowed_ends_the_command_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_sleep(s: float) -> None:
        return None

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    poller, served = _poller([503] * 50, outage_s=-1.0)  # any outage is too long
    with pytest.raises(GatewayError) as err:
        await poller()
    assert err.value.exit_code == exits.UNAVAILABLE and "still failing after" in err.value.message
    assert "evidentia ingest --status j" in err.value.message
    assert served == [503]  # given up at the first failure that outlasts outage_s, not retried on


async def test_a_job_that_does_not_exist_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    poller, served = _poller([404], outage_s=600)
    with pytest.raises(GatewayError) as err:
        await poller()
    assert err.value.status == 404 and served == [404]
