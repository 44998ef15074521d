"""Token accounting through the running services and real Kafka: offline, then Claude mode (fake Messages API).

The synthesizer's calls (answers and the workflows' LLM steps) travel back to the gateway in its replies
(``llm_calls``), which reports ``tokens_used``. Each service counts its calls in Prometheus
(``evidentia_llm_calls_total``, ``evidentia_llm_tokens_total``), read here from its /metrics.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared.events import TokenUsage
from tests.fakes.anthropic_server import FakeAnthropic
from tests.integration.capture import capture
from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIELDS = list(TokenUsage.model_fields)
KINDS = {"input_tokens": "input", "output_tokens": "output"}


def counters(stack: Stack, service: str, name: str) -> dict[tuple[str, ...], float]:
    port = stack.services.processes[service].port
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value  # type: ignore[arg-type]
    return out


def added_up(usages: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """What the API reported for these calls, added up."""
    return {k: sum(int(u[k]) for _, u in usages) for k in FIELDS}


def test_offline_an_answer_reports_no_call(stack: Stack, sample_pmids: list[str]) -> None:
    with stack.http() as http:
        body = http.post("/v1/ask", json={"question": "What is known about AIDS treatment in prisons?"}).json()
    assert body["mode"] == "extractive"
    assert body["llm_calls"] == [] and body["tokens_used"] == dict.fromkeys(FIELDS, 0)


def test_claude_mode_reports_every_call_and_counts_it_in_prometheus(
    stack: Stack, sample_pmids: list[str], llm_mode: FakeAnthropic
) -> None:
    fake = llm_mode
    fake.requests.clear()
    fake.usages.clear()
    before = counters(stack, "synthesizer", "evidentia_llm_tokens_total")
    with stack.http() as http:
        # One question at a time: every call the API answers meanwhile is this question's (the gateway replies
        # only once the synthesizer has finished all of them).
        asked = {"question": "What is known about AIDS treatment in prisons?", "fetch": "never"}
        r = http.post("/v1/ask", json=asked)
        assert r.status_code == 200, r.text
        capture(asked, r, "ask with a key: llm_calls and tokens_used")
        body = r.json()
        first = list(fake.usages)
        events: list[tuple[str, Any]] = []
        question = {"question": "What is known about AIDS care in correctional facilities?", "fetch": "never"}
        with http.stream("POST", "/v1/ask/stream", json=question) as s:
            kind = ""
            for line in s.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line.removeprefix("data: "))))
        second = list(fake.usages)[len(first) :]
    assert body["mode"] == "llm"
    steps = sorted(c["step"] for c in body["llm_calls"])
    # classify: /v1/ask's query intelligence (the fast model); answer, summary and the support check: the answer.
    # (PubMed is not searched: ``fetch: never``; a search would add the query's ``enhance`` call, counted too.)
    # agreement: how the cited sources stand to the main finding, asked when the answer cites two or more (the
    # shared store may hold more than one relevant source by the time this module runs).
    agreement = ["agreement"] if len(body["citations"]) >= 2 else []
    assert steps == sorted(["answer", "classify", "summary", "support_check", *agreement]), steps
    assert {c["service"] for c in body["llm_calls"]} == {"synthesizer"}
    answer = next(c for c in body["llm_calls"] if c["step"] == "answer")
    assert answer["model"] == "claude-test" == body["model"]
    support = next(c for c in body["llm_calls"] if c["step"] == "support_check")
    assert support["model"] == "claude-haiku-4-5"  # EVIDENTIA_LLM_FAST_MODEL's default
    classify = next(c for c in body["llm_calls"] if c["step"] == "classify")
    assert classify["model"] == "claude-haiku-4-5"
    # The tokens the client sees are the tokens the API reported for this question's calls, across Kafka.
    assert len(first) == 4 + len(agreement) and body["tokens_used"] == added_up(first)
    assert body["tokens_used"]["input_tokens"] > 0 and body["tokens_used"]["output_tokens"] > 0

    named = dict(events)
    assert named["metrics"]["tokens_used"] == named["done"]["tokens_used"] == added_up(second)
    assert any(c["step"] == "answer" and c["usage"]["output_tokens"] > 1 for c in named["metrics"]["llm_calls"])

    # Prometheus: the synthesizer counted exactly the tokens of both answers, by model and kind.
    after = counters(stack, "synthesizer", "evidentia_llm_tokens_total")
    calls = body["llm_calls"] + named["metrics"]["llm_calls"]
    for field, kind in KINDS.items():
        for model in {c["model"] for c in calls}:
            key = (("kind", kind), ("model", model), ("service", "synthesizer"))
            want = sum(c["usage"][field] for c in calls if c["model"] == model)
            assert after.get(key, 0.0) - before.get(key, 0.0) == want, (key, want)
    answered = counters(stack, "synthesizer", "evidentia_llm_calls_total")
    assert answered[(("model", "claude-test"), ("service", "synthesizer"), ("step", "answer"))] >= 2
