"""Citations tied to the sentences they rest on, and where the sources agree, through the running services.

Offline (extractive) first: every citation quotes its source exactly, at offsets into the stored chunk and the
document, in /v1/ask, the stream and the stored conversation; the agreement is absent and says why. Then Claude
mode against the fake Anthropic server: a reworded claim takes the support check's best-matching sentence, an
invented one is marked unsupported, and the agreement labels are strictly checked (made-up ids, sources not
retrieved and sources not cited are dropped and counted).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from shared.text import split_sentences
from tests.fakes.anthropic_server import FakeAnthropic, agreeing_labels, default_answer
from tests.integration.capture import capture
from tests.integration.conftest import Stack
from tests.integration.test_pipeline import db_fetch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = "What is known about AIDS treatment in correctional facilities?"
NOT_RETRIEVED = "PMID:1"  # no such record in the store


def stream(http: httpx.Client, payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The stream's events by name (the last of each), with the tokens joined under ``"text"``."""
    named: dict[str, dict[str, Any]] = {}
    text = []
    with http.stream("POST", "/v1/ask/stream", json=payload) as r:
        assert r.status_code == 200, r.read()
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                named[kind] = data
                if kind == "token":
                    text.append(data["text"])
    named["text"] = {"text": "".join(text)}
    return named


def check_quotes(body: dict[str, Any], sources: Sequence[dict[str, Any]], chunk_starts: dict[str, int]) -> int:
    """Every quoted span is its chunk's stored text at its offsets (and the document's, shifted); the count."""
    by_chunk = {s["chunk_id"]: s for s in sources}
    quoted = 0
    for c in body["citations"]:
        assert c["created_at"] and c["spans"], c
        assert c["text"] == c["spans"][0]["claim"] and c["start"] == c["spans"][0]["answer_start"]
        for span in c["spans"]:
            assert span["claim"].rstrip(".") in body["answer"][span["answer_start"] : span["answer_end"]]
            if span["quote"] is None:
                continue
            quoted += 1
            assert span["document_id"] == c["document_id"]
            chunk = by_chunk[span["chunk_id"]]
            assert chunk["text"][span["start"] : span["end"]] == span["quote"]
            assert span["document_start"] == chunk_starts[span["chunk_id"]] + span["start"]
            assert span["document_end"] - span["document_start"] == len(span["quote"])
    return quoted


def chunk_starts(stack: Stack, sources: Sequence[dict[str, Any]]) -> dict[str, int]:
    rows = db_fetch(
        stack.infra.postgres.url,
        "SELECT chunk_id, char_start FROM chunks WHERE chunk_id = ANY($1::text[])",
        [s["chunk_id"] for s in sources],
    )
    return {r["chunk_id"]: r["char_start"] for r in rows}


@pytest.fixture(scope="module")
def offline_answer(stack: Stack, sample_pmids: list[str]) -> dict[str, Any]:
    with stack.http() as http:
        asked = {"question": QUESTION}
        r = http.post("/v1/ask", json=asked)
        assert r.status_code == 200, r.text
        capture(asked, r, "ask offline: citation spans, agreement not labelled")
    body: dict[str, Any] = r.json()
    assert body["mode"] == "extractive" and body["citations"], body
    return body


def test_extractive_citations_quote_their_sources_exactly(stack: Stack, offline_answer: dict[str, Any]) -> None:
    body = offline_answer
    quoted = check_quotes(body, body["sources"], chunk_starts(stack, body["sources"]))
    assert quoted >= 1
    spans = [s for c in body["citations"] for s in c["spans"]]
    assert all(s["method"] == "quote" and s["supported"] is True and s["score"] == 1.0 for s in spans)
    assert {c["created_at"] for c in body["citations"]} == {body["citations"][0]["created_at"]}
    # Offline nothing is guessed: no label, and the reason.
    assert body["agreement"]["status"] == "offline" and body["agreement"]["labels"] == []
    assert "ANTHROPIC_API_KEY" in body["agreement"]["reason"]


def test_the_stream_and_the_conversation_carry_the_spans(stack: Stack, offline_answer: dict[str, Any]) -> None:
    with stack.http() as http:
        events = stream(http, {"question": QUESTION})
        cid = events["citations"]["conversation_id"]
        view = http.get(f"/v1/conversations/{cid}").json()
    cites = events["citations"]
    sources = events["retrieval_done"]["sources"]
    assert check_quotes(cites, sources, chunk_starts(stack, sources)) >= 1
    assert cites["agreement"]["status"] == "offline" and events["done"]["agreement"] is None
    (message,) = [m for m in view["messages"] if m["role"] == "assistant"]
    stored = {c["citation_id"]: c["spans"] for c in message["citations"]}
    assert stored == {c["citation_id"]: c["spans"] for c in cites["citations"]}
    assert all(c["spans"] == [] for c in view["references"])  # the reference list keeps the sources only


@contextmanager
def every_passage_relevant(stack: Stack) -> Iterator[None]:
    """The synthesizer restarted with no relevance floor (the sample's other records are off-topic, and an answer
    needs two sources to compare), then restarted as it was."""
    proc = stack.services.processes["synthesizer"]
    before = proc.env
    proc.env = {**before, "EVIDENTIA_RETRIEVAL_MIN_SCORE": "-1"}
    stack.services.restart("synthesizer")
    try:
        yield
    finally:
        proc.env = before
        stack.services.restart("synthesizer")


def reworded(text: str) -> str | None:
    """A long sentence of ``text`` said a little differently (not word for word): "Reportedly, " + all but its
    first word; None when ``text`` has none."""
    for s in split_sentences(text):
        if len(re.findall(r"[A-Za-z]{4,}", s)) >= 8 and "[" not in s:
            return "Reportedly, " + s.split(" ", 1)[1].rstrip(".")
    return None


def test_claude_answers_tie_claims_to_the_best_sentence_and_sources_are_labelled(
    stack: Stack, offline_answer: dict[str, Any], llm_mode: FakeAnthropic
) -> None:
    texts = {f"PMID:{s['pmid']}": s["text"] for s in offline_answer["sources"]}

    def answer(ids: Sequence[str]) -> str:
        good = next((i for i in ids if reworded(texts.get(i, ""))), None)
        other = next((i for i in ids if i != good), None)
        if good is None or other is None:
            return default_answer(ids)
        return (
            f"{reworded(texts[good])} [{good}]. "
            f"Penguins established colonies on Mars during the ancient dynasties [{other}]."
        )

    retrieved_not_cited: list[str] = []

    def labels(ids: Sequence[str]) -> dict[str, Any]:
        good = next(i for i in ids if reworded(texts.get(i, "")))
        extra = [i for i in texts if i not in ids][:1]
        retrieved_not_cited.extend(extra)
        return {
            "main_finding": "Treatment in correctional facilities is feasible.",
            "labels": [
                {"id": good, "label": "supports", "reason": "Reports it."},
                *({"id": i, "label": "contradicts", "reason": "Reports otherwise."} for i in ids if i != good),
                {"id": "PMID:99999999", "label": "supports"},  # made up
                {"id": NOT_RETRIEVED, "label": "mixed"},  # not retrieved
                *({"id": i, "label": "not_addressed"} for i in extra),  # retrieved, not cited
            ],
        }

    llm_mode.answer, llm_mode.agreement = answer, labels
    try:
        with every_passage_relevant(stack), stack.http() as http:
            asked = {"question": QUESTION}
            r = http.post("/v1/ask", json=asked)
            assert r.status_code == 200, r.text
            capture(asked, r, "ask with a key: spans from the support check, agreement labels")
            events = stream(http, asked)
    finally:
        llm_mode.answer, llm_mode.agreement = default_answer, agreeing_labels
    body = r.json()
    assert body["mode"] == "llm" and len(body["citations"]) == 2, body
    first_id = body["citation_check"]["verified"][0]
    spans = {c["citation_id"]: c["spans"] for c in body["citations"]}
    (good,) = spans[first_id]
    assert good["supported"] is True and good["method"] == "llm" and good["quote"]
    assert good["claim"].removeprefix("Reportedly, ").rstrip(".") in good["quote"]
    (bad,) = next(v for k, v in spans.items() if k != first_id)
    assert bad["supported"] is False and bad["quote"] is None and bad["start"] is None
    assert check_quotes(body, body["sources"], chunk_starts(stack, body["sources"])) == 1

    agreement = body["agreement"]
    assert agreement["status"] == "labelled" and agreement["disagree"] is True
    assert {a["citation_id"]: a["label"] for a in agreement["labels"]} == {
        c["citation_id"]: ("supports" if c["citation_id"] == first_id else "contradicts") for c in body["citations"]
    }
    assert agreement["dropped"] == 2 + len(set(retrieved_not_cited))
    assert agreement["counts"] == {"supports": 1, "contradicts": 1, "mixed": 0, "not_addressed": 0}
    assert "the sources disagree" in body["answer"] and "the sources disagree" in body["numbered_answer"]
    assert not {"PMID:99999999", NOT_RETRIEVED} & {a["citation_id"] for a in agreement["labels"]}

    assert events["done"]["agreement"] == agreement["counts"]
    assert events["citations"]["agreement"]["counts"] == agreement["counts"]
    assert events["text"]["text"].strip() == events["citations"]["answer"]
