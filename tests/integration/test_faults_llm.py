"""Faults in Claude mode, counted on their side effect: model calls per request.

The synthesizer is killed (SIGKILL) while its model call is in flight. Requests are acknowledged on
receipt, so the restarted synthesizer never takes the request again by itself (a second bill for an answer
nobody waits for). With synthesis resends off, the client gets a clear 504; with them on (the default), the
gateway hears no progress from the dead synthesizer, resends the request once, and the restarted one answers
it: two answer calls, one answer. A synthesizer that is only slow keeps sending progress and is never asked
twice.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import httpx
import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.integration.conftest import Stack
from tests.integration.gateways import extra_gateway, gateway_counter

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT_S = 8.0


def answer_calls(fake: FakeAnthropic, marker: str) -> int:
    """Answer calls to the model (the summary's tool calls aside) for the question carrying ``marker``."""
    return sum(1 for rq in list(fake.requests) if not rq.uses_tools and marker in rq.user_text)


def test_kill_9_synthesizer_mid_answer_never_calls_the_model_twice(
    stack: Stack, sample_pmids: list[str], llm_mode: FakeAnthropic
) -> None:
    fake = llm_mode
    marker = f"m{uuid.uuid4().hex[:8]}"
    question = f"What is known about AIDS treatment in correctional facilities ({marker})?"
    synthesizer = stack.services.processes["synthesizer"]
    events: list[tuple[str, dict[str, object]]] = []

    def ask(url: str) -> None:
        with (
            httpx.Client(base_url=url, timeout=TIMEOUT_S + 60) as http,
            http.stream("POST", "/v1/ask/stream", json={"question": question}) as r,
        ):
            assert r.status_code == 200
            kind = ""
            for line in r.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line.removeprefix("data: "))))

    fake.token_delay_s = 0.3  # about 6 s of streaming for the default answer
    try:
        with extra_gateway(
            stack,
            "llm-fault",
            {"EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": str(TIMEOUT_S), "EVIDENTIA_KAFKA_SYNTHESIS_RESEND_AFTER_S": "0"},
        ) as url:
            client = threading.Thread(target=ask, args=(url,))
            client.start()
            deadline = time.monotonic() + 60
            while answer_calls(fake, marker) == 0:
                assert time.monotonic() < deadline, "the synthesizer never called the model"
                time.sleep(0.02)
            synthesizer.kill()
            killed_at = time.monotonic()
            client.join(TIMEOUT_S + 60)
            assert not client.is_alive()
    finally:
        fake.token_delay_s = 0.0
    # The answer was still streaming when the synthesizer died: the client saw no final answer, only
    # the gateway's timeout.
    kinds = [k for k, _ in events]
    assert "error" in kinds and "citations" not in kinds, kinds
    error = dict(events[kinds.index("error")][1])
    assert error["status"] == 504, error
    synthesizer.start()
    stack.services.wait_ready(120, ["synthesizer"])
    time.sleep(max(0.0, 5.0 - (time.monotonic() - killed_at)))  # time to take a redelivered request
    assert answer_calls(fake, marker) == 1, "the restarted synthesizer called the model again"

    second = f"n{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 60
    with stack.http() as http:
        while True:  # until the restarted synthesizer has rejoined its group
            r = http.post("/v1/ask", json={"question": f"What is known about AIDS treatment in prisons ({second})?"})
            if r.status_code == 200 or time.monotonic() > deadline:
                break
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == "llm"
    assert answer_calls(fake, second) == 1


RESENDS = ("evidentia_request_resends_total", "synthesis.requests")


def test_kill_9_synthesizer_mid_answer_the_gateway_resends_and_the_restarted_one_answers(
    stack: Stack, sample_pmids: list[str], llm_mode: FakeAnthropic
) -> None:
    fake = llm_mode
    marker = f"m{uuid.uuid4().hex[:8]}"
    question = f"What is known about AIDS treatment in correctional facilities ({marker})?"
    synthesizer = stack.services.processes["synthesizer"]
    result: dict[str, httpx.Response] = {}
    env = {"EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": "60", "EVIDENTIA_KAFKA_SYNTHESIS_RESEND_AFTER_S": "4"}
    fake.response_delay_s = 3.0  # the answer call is still in flight when the synthesizer dies
    try:
        with extra_gateway(stack, "llm-resend", env) as url:
            before = gateway_counter(url, *RESENDS)

            def ask() -> None:
                result["r"] = httpx.post(f"{url}/v1/ask", json={"question": question}, timeout=120)

            client = threading.Thread(target=ask)
            client.start()
            deadline = time.monotonic() + 60
            while answer_calls(fake, marker) == 0:
                assert time.monotonic() < deadline, "the synthesizer never called the model"
                time.sleep(0.02)
            synthesizer.kill()
            assert client.is_alive(), "the answer came before the kill: nothing was in flight"
            fake.response_delay_s = 0.0
            synthesizer.start()
            stack.services.wait_ready(120, ["synthesizer"])
            client.join(120)
            assert not client.is_alive()
            resends = gateway_counter(url, *RESENDS) - before
    finally:
        fake.response_delay_s = 0.0
    r = result["r"]
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "llm" and body["citations"], body
    assert resends == 1
    # One call died with the synthesizer, the copy's call answered; never a third.
    assert answer_calls(fake, marker) == 2


def test_a_slow_but_alive_synthesizer_is_never_asked_twice(
    stack: Stack, sample_pmids: list[str], llm_mode: FakeAnthropic
) -> None:
    fake = llm_mode
    marker = f"m{uuid.uuid4().hex[:8]}"
    question = f"What is known about AIDS treatment in correctional facilities ({marker})?"
    # The answer takes 7 s, past the 3 s resend delay; the synthesizer's progress (every 2 s) holds the copy back.
    env = {"EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": "60", "EVIDENTIA_KAFKA_SYNTHESIS_RESEND_AFTER_S": "3"}
    fake.response_delay_s = 7.0
    try:
        with extra_gateway(stack, "llm-slow", env) as url:
            before = gateway_counter(url, *RESENDS)
            r = httpx.post(f"{url}/v1/ask", json={"question": question}, timeout=120)
            resends = gateway_counter(url, *RESENDS) - before
    finally:
        fake.response_delay_s = 0.0
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == "llm"
    assert resends == 0
    assert answer_calls(fake, marker) == 1
