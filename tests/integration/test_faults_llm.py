"""A fault in Claude mode, counted on its side effect: model calls per request.

The synthesizer is killed (SIGKILL) while its model call is streaming. Requests are acknowledged on
receipt, so the restarted synthesizer must not take the request again and call the model a second time
(a second bill for an answer nobody waits for); the client gets a clear 504, and the next question costs
exactly one answer call.
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
from tests.integration.gateways import extra_gateway

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
        with extra_gateway(stack, "llm-fault", {"EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": str(TIMEOUT_S)}) as url:
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
