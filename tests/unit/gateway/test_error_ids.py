"""Clients get an error id, never internal text, for a 5xx; the detail is logged with that id."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from aiokafka.errors import KafkaConnectionError

from shared.events import ErrorInfo, RetrievalReply, SynthesisReply
from shared.kafka.reply_client import RemoteError, RequestTimeout
from tests.fakes.anthropic_server import FakeAnthropic
from tests.unit.gateway.conftest import build_app, client

SECRET_DETAIL = "connection to 10.1.2.3:5432 failed for user evidentia (password s3cr3t)"
QUESTION = "Does telephone counseling increase mammography screening?"


def logged_error_ids(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    return {str(r.error_id): str(getattr(r, "error", "")) for r in caplog.records if getattr(r, "error_id", None)}


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (RemoteError(ErrorInfo(type="OperationalError", message=SECRET_DETAIL, status=500)), 500),
        (RequestTimeout("retrieval.requests", 30.0), 504),
        (KafkaConnectionError(SECRET_DETAIL), 503),
        (RuntimeError(SECRET_DETAIL), 500),
        (asyncpg.ConnectionDoesNotExistError(SECRET_DETAIL), 503),
        (ConnectionRefusedError(111, SECRET_DETAIL), 503),
    ],
    ids=["remote", "timeout", "kafka", "unexpected", "database-connection-lost", "connection-refused"],
)
async def test_a_server_error_answers_an_error_id_and_logs_the_detail(
    exc: Exception, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    app, kafka, _ = build_app()

    async def failing(request: object) -> RetrievalReply:
        raise exc

    kafka.retrieve = failing  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, logger="services.gateway.errors")
    # Starlette re-raises an unexpected exception after its handler answered (for the server to log): the
    # transport must not turn that into the test's exception, as uvicorn does not.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        r = await http.post("/v1/search", json={"query": "mammography"})
    assert r.status_code == status
    body = r.json()
    assert set(body) == {"detail", "type", "status", "error_id"}
    assert r.headers["x-error-id"] == body["error_id"]
    assert "s3cr3t" not in r.text and "10.1.2.3" not in r.text and "retrieval.requests" not in r.text
    logged = logged_error_ids(caplog)
    assert body["error_id"] in logged
    assert str(exc)[:20] in logged[body["error_id"]] or type(exc).__name__ in logged[body["error_id"]]


async def test_a_client_error_keeps_its_reason() -> None:
    app, kafka, _ = build_app()

    async def refuses(request: object) -> RetrievalReply:
        return RetrievalReply(error=ErrorInfo(type="BadRequest", message="unknown filter 'colour'", status=400))

    kafka.retrieve = refuses  # type: ignore[method-assign]
    async with client(app) as http:
        r = await http.post("/v1/search", json={"query": "mammography"})
    assert r.status_code == 400
    assert r.json()["detail"] == "unknown filter 'colour'" and "error_id" not in r.json()


async def test_a_failed_stream_says_an_error_id_not_the_upstream_text(
    fake_anthropic: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    app, kafka, _ = build_app()

    async def broken(request: object) -> RetrievalReply:
        raise RemoteError(ErrorInfo(type="PostgresError", message=SECRET_DETAIL, status=502))

    kafka.retrieve = broken  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, logger="services.gateway.errors")
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    errors = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and "status" in line]
    assert errors and errors[-1]["status"] == 502 and errors[-1]["error_id"] in logged_error_ids(caplog)
    assert "s3cr3t" not in r.text


async def test_a_synthesizer_failure_mid_stream_says_an_error_id_not_its_exception_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, kafka, _ = build_app()

    async def fails(request: object) -> AsyncIterator[tuple[str, bytes]]:
        error = ErrorInfo(type="APIConnectionError", message=SECRET_DETAIL, status=502)
        yield "SynthesisReply", SynthesisReply(error=error).model_dump_json().encode()

    kafka.synthesize_stream = fails  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, logger="services.gateway.errors")
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    assert r.status_code == 200 and kafka.retrievals  # the failure struck once the stream had started
    assert "s3cr3t" not in r.text and "10.1.2.3" not in r.text
    error = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and "status" in line][-1]
    assert error["status"] == 502 and error["type"] == "APIConnectionError"
    assert SECRET_DETAIL in logged_error_ids(caplog)[error["error_id"]]
