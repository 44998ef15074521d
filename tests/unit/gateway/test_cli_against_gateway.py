"""The ``evidentia`` CLI against a gateway served over real HTTP (uvicorn) with API keys and a rate limit.

The ask/search gateway is the real app (``create_app``: routes, API key guard, rate limit, server-sent
events) with the in-process fakes of conftest.py behind it (Kafka, the conversation store, the fake Anthropic
server for streamed tokens). The ingestion gateway is a small app with the real guard in front of an
in-memory job table whose jobs take a few seconds, so five CLI processes polling at once run into 429s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response

from cli import exits
from cli.main import main
from services.gateway import security
from services.gateway.security import key_digest
from shared.db.jobs import JobStatus
from shared.settings import GatewaySettings
from tests.fakes.anthropic_server import FakeAnthropic
from tests.integration.conftest import free_port
from tests.unit.gateway.conftest import build_app

KEY = "cli-test-key-0123456789"
ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """``app`` on 127.0.0.1 (uvicorn in a thread, no lifespan: the fakes are already wired in)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_config=None, access_log=False)
    )
    thread = threading.Thread(target=server.run, name="cli-test-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def answers_gateway(fake_anthropic: FakeAnthropic) -> Iterator[str]:
    guard = GatewaySettings(api_key_hashes=key_digest(KEY), rate_limit_per_minute=600, rate_limit_burst=50)
    app, _, _ = build_app(fake=fake_anthropic, gateway=guard)
    with serve(app) as url:
        yield url


def test_ask_streams_tokens_then_prints_the_verified_answer(
    answers_gateway: str, fake_anthropic: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(fake_anthropic.requests)
    rc = main(["--gateway-url", answers_gateway, "--api-key", KEY, "ask", "Does telephone counseling help?"])
    captured = capsys.readouterr()
    assert rc == exits.OK, captured.err
    assert len(fake_anthropic.requests) > before  # the stream went to the model
    streamed = captured.err
    # The model's tokens arrive on stderr as they stream (raw inline ids); the verified answer on stdout is
    # numbered [1], [2]... with its reference list and the citation check.
    assert "passages retrieved" in streamed
    assert "[PMID:" in streamed
    assert "Answer (llm, claude-test)" in captured.out
    assert "[1]" in captured.out and "[PMID:" not in captured.out.split("Citations")[0]
    assert "citation check:" in captured.out
    assert "conversation:" in captured.out
    # What the answer cost: the synthesizer's four calls (answer, summary and the sources' agreement on the main
    # model; support check on the fast one) and their tokens, from the stream's metrics event.
    assert "model calls: 4 (claude-test x3, claude-haiku-4-5 x1); tokens: " in captured.out
    # How the two cited sources stand to the main finding (the fake labels both as supporting it).
    assert "agreement: sources agree: 2 supports" in captured.out
    # How the question was understood (query_intelligence: offline classification here, English).
    assert "question: other (rules); language: en; answer in: en" in captured.out
    assert "other: searched every source" in captured.out


def test_ask_json_is_one_object_with_the_verified_answer(
    answers_gateway: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["ask", "Does telephone counseling help?", "--json", "--gateway-url", answers_gateway, "--api-key", KEY])
    captured = capsys.readouterr()
    assert rc == exits.OK, captured.err
    data = json.loads(captured.out)
    assert data["mode"] == "llm"
    assert data["citations"] and data["citation_check"]["verified"]
    assert data["metrics"]["time_to_first_token_ms"] > 0
    assert data["metrics"]["tokens_used"]["output_tokens"] > 0 and len(data["metrics"]["llm_calls"]) == 4
    assert "[1]" in data["numbered_answer"]
    # --no-stream gives the same fields from POST /v1/ask
    rc = main(["ask", "Does telephone counseling help?", "--json", "--no-stream", "--gateway-url", answers_gateway])
    assert rc == exits.NOPERM  # no key given and none in the environment
    assert "--api-key" in capsys.readouterr().err


def test_the_key_comes_from_the_environment_and_a_wrong_key_is_refused_readably(
    answers_gateway: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVIDENTIA_API_KEY", KEY)
    monkeypatch.setenv("EVIDENTIA_GATEWAY_URL", answers_gateway)
    assert main(["search", "mammography screening", "--json"]) == exits.OK
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [h["document_id"] for h in hits][:1] == ["pmid:101"] or hits
    monkeypatch.setenv("EVIDENTIA_API_KEY", "not-the-key")
    assert main(["search", "mammography screening"]) == exits.NOPERM
    err = capsys.readouterr().err
    assert err.strip() == "evidentia: error: search: refused (401): the gateway does not accept this API key"
    assert main(["ask", "x", "--api-key", "not-the-key"]) == exits.NOPERM  # the stream route too
    assert main(["search", "q", "--top-n", "100000", "--api-key", KEY]) == exits.DATAERR
    assert "top_n" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- ingestion


def ingestion_gateway(guard: GatewaySettings, seconds_per_doc: float) -> tuple[FastAPI, Counter[int]]:
    """The real guard before an in-memory job table; each job's 3 documents finish one per ``seconds_per_doc``."""
    app = FastAPI()
    jobs: dict[str, float] = {}
    statuses: Counter[int] = Counter()

    @app.post("/v1/ingest", status_code=202)
    async def ingest() -> dict[str, str]:
        job_id = uuid.uuid4().hex
        jobs[job_id] = time.monotonic()
        return {"job_id": job_id, "status_url": f"/v1/ingest/{job_id}"}

    @app.get("/v1/ingest/{job_id}")
    async def status(job_id: str) -> JobStatus:
        if job_id not in jobs:
            raise HTTPException(404, f"no ingestion job {job_id}")
        done = min(3, int((time.monotonic() - jobs[job_id]) / seconds_per_doc))
        counts = {"embedded": done, "fetched": 3 - done}
        return JobStatus(job_id=job_id, kind="pmids", state="discovered", total=3, counts=counts)

    security.install(app, guard)

    @app.middleware("http")  # outermost: sees the guard's 429s too
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        statuses[response.status_code] += 1
        return response

    return app, statuses


def test_five_concurrent_ingests_against_a_low_rate_limit_all_finish() -> None:
    guard = GatewaySettings(api_key_hashes=key_digest(KEY), rate_limit_per_minute=30, rate_limit_burst=2)
    app, statuses = ingestion_gateway(guard, seconds_per_doc=1.5)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVIDENTIA_API_KEY": KEY}
    with serve(app) as url:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "cli.main", "--gateway-url", url, "ingest", "--pmids", str(i), "--json"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(5)
        ]
        results = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    job_ids = set()
    for rc, out, err in results:
        assert rc == exits.OK, err
        assert "no ingestion job" not in err
        status = json.loads(out)
        assert status["done"] is True and status["counts"]["embedded"] == 3
        job_ids.add(status["job_id"])
    assert len(job_ids) == 5
    assert statuses[429] > 0, statuses  # the limit did strike...
    assert "rate limited by the gateway (429); retrying in" in "".join(err for _, _, err in results)
    # ... and the CLIs backed off: 5 jobs of ~4.5 s at a steady 0.5 request/s leave room for few requests
    assert statuses[200] + statuses[202] >= 10
    assert sum(statuses.values()) < 80, statuses


def test_a_job_the_gateway_does_not_know_is_exit_66(capsys: pytest.CaptureFixture[str]) -> None:
    guard = GatewaySettings(api_key_hashes=key_digest(KEY))
    app, _ = ingestion_gateway(guard, seconds_per_doc=1.0)
    with serve(app) as url:
        rc = main(["--gateway-url", url, "--api-key", KEY, "ingest", "--status", "nope"])
    assert rc == exits.NOINPUT
    assert "no ingestion job nope" in capsys.readouterr().err


def test_ask_sends_the_query_input_options(capsys: pytest.CaptureFixture[str]) -> None:
    app, kafka, _ = build_app()
    with serve(app) as url:
        rc = main(
            [
                "ask",
                "Does telephone counseling help?",
                "--no-stream",
                "--gateway-url",
                url,
                "--language",
                "fr",
                "--source",
                "pubmed",
                "--source",
                "guidelines",
                "--min-evidence-level",
                "2",
            ]
        )
    assert rc == exits.OK, capsys.readouterr().err
    f = kafka.retrievals[-1].filters
    assert f.sources == ["pubmed", "bookshelf"] and f.min_evidence_level == 0.9
    assert "answer in: en" in capsys.readouterr().out  # offline: French was asked, English is what it can write
