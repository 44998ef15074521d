"""``fetch`` on ``/v1/ask`` through the running services: PubMed (the fake E-utilities) searched at question time
through the fetcher, records the store does not hold ingested by the ordinary pipeline and waited for, then
retrieved and cited; ``never``; the 5-day cache of a question's search; NCBI refusing (rate limited for longer
than the fetcher waits); a key without the ``ingest`` scope; the stream's progress events.

The records are real PubMedQA abstracts (``data/samples/pubmedqa500.jsonl``) served by the fake only; each
question is its article's PubMedQA question.
"""

from __future__ import annotations

import hashlib
import html
import json
import time
from typing import Any

import httpx
import pytest

from services.gateway.livefetch.query import question_terms, relaxed_queries
from tests.integration.capture import capture
from tests.integration.conftest import Stack
from tests.integration.gateways import extra_gateway
from tests.integration.workflow_data import pubmed_set

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# (own PMID, its PubMedQA question); the search of each also returns two other records (distractors).
FETCHED = ("17113061", "Do mutations causing low HDL-C promote increased carotid intima-media thickness?")
NEVER = ("23831910", "Double balloon enteroscopy: is it efficacious and safe in a community setting?")
STREAMED = ("24183388", "Is the Hawkins sign able to predict necrosis in fractures of the neck of the astragalus?")
REFUSED = "Do somatostatin analogues improve survival of zebra finches with pancreatic islet tumours?"
DISTRACTORS = ["10808977", "18251357", "24160268", "25432938"]
# A topic the store holds (three records on it, ingested first): ``auto`` answers from the store.
HELD_PMIDS = ["39350001", "39350002", "39350003"]  # no other module stores these (the session shares one store)
HELD_QUESTION = "Does retinoic acid signalling drive zebrafish fin regeneration after amputation?"
HELD_ABSTRACTS = [
    "Retinoic acid signalling in the blastema drives zebrafish fin regeneration after amputation of the caudal fin.",
    "After amputation, zebrafish fin regeneration required retinoic acid signalling: blocking it stopped the blastema.",
    "We show that retinoic acid signalling controls osteoblast dedifferentiation in zebrafish fin regeneration after "
    "amputation.",
]


def held_records() -> bytes:
    """Three PubMed records on :data:`HELD_QUESTION`'s topic."""
    articles = "".join(
        f'<PubmedArticle><MedlineCitation Owner="NLM" Status="MEDLINE"><PMID Version="1">{pmid}</PMID>'
        '<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Print"><PubDate><Year>2021</Year></PubDate>'
        "</JournalIssue><Title>Developmental Dynamics</Title></Journal>"
        f"<ArticleTitle>Zebrafish fin regeneration study {i}</ArticleTitle><Abstract><AbstractText>"
        f"{html.escape(text)}</AbstractText></Abstract><Language>eng</Language></Article></MedlineCitation>"
        f'<PubmedData><ArticleIdList><ArticleId IdType="pubmed">{pmid}</ArticleId></ArticleIdList></PubmedData>'
        "</PubmedArticle>"
        for i, (pmid, text) in enumerate(zip(HELD_PMIDS, HELD_ABSTRACTS, strict=True), 1)
    )
    return f"<?xml version='1.0' ?>\n<PubmedArticleSet>{articles}</PubmedArticleSet>".encode()


def first_query(question: str) -> str:
    return relaxed_queries(question_terms(question))[0]


@pytest.fixture(scope="module")
def served(stack: Stack) -> None:
    """The fake serves the records and each question's search (own record first, as relevance order would)."""
    pmids = [FETCHED[0], NEVER[0], STREAMED[0], *DISTRACTORS]
    stack.fake.add_pubmed_records(pubmed_set(pmids))
    stack.fake.add_search(first_query(FETCHED[1]), [FETCHED[0], *DISTRACTORS[:2]])
    stack.fake.add_search(first_query(NEVER[1]), [NEVER[0], *DISTRACTORS[2:]])
    stack.fake.add_search(first_query(STREAMED[1]), [STREAMED[0], *DISTRACTORS[1:3]])


def esearches(stack: Stack, question: str) -> int:
    return sum(1 for r in stack.fake.requests_to("esearch") if r.param("term") == first_query(question))


def test_never_answers_from_the_store_without_searching(stack: Stack, served: None) -> None:
    with stack.http() as http:
        body = http.post("/v1/ask", json={"question": NEVER[1], "fetch": "never"}).json()
    assert body["fetch"]["mode"] == "never" and body["fetch"]["searched"] is False
    assert esearches(stack, NEVER[1]) == 0
    assert f"pubmed:{NEVER[0]}" not in {s["document_id"] for s in body["sources"]}


def test_auto_fetches_the_question_s_record_and_cites_it(stack: Stack, served: None) -> None:
    t0 = time.monotonic()
    request = {"question": FETCHED[1], "fetch": "auto"}  # the product's default (the test stack's is never)
    with stack.http() as http:
        r = http.post("/v1/ask", json=request)
    elapsed = time.monotonic() - t0
    capture(request, r, "ask: fetch auto")
    body = r.json()
    fetch = body["fetch"]
    assert fetch["mode"] == "auto" and fetch["searched"] and not fetch["cached"], fetch
    assert fetch["query"] == first_query(FETCHED[1]) and fetch["found"] == 3
    own = f"pubmed:{FETCHED[0]}"
    assert own in fetch["ingested"], fetch  # searchable within the budget
    assert set(fetch["ingested"]) | set(fetch["pending"]) == {own, *(f"pubmed:{p}" for p in DISTRACTORS[:2])}
    assert fetch["job_id"] and elapsed < 20 + 15  # the budget, plus retrieval and synthesis
    assert own in {s["document_id"] for s in body["sources"]}
    assert f"PMID:{FETCHED[0]}" in {c["citation_id"] for c in body["citations"]}
    with stack.http() as http:
        job = http.get(f"/v1/ingest/{fetch['job_id']}").json()
    assert job["total"] == 3


def test_auto_answers_from_a_store_that_holds_the_topic_without_searching(stack: Stack, served: None) -> None:
    stack.fake.add_pubmed_records(held_records())
    with stack.http() as http:
        job = http.post("/v1/ingest", json={"pmids": HELD_PMIDS}).json()["job_id"]
        assert stack.wait_job(job)["done"]
        body = http.post("/v1/ask", json={"question": HELD_QUESTION, "fetch": "auto"}).json()
    fetch = body["fetch"]
    assert fetch["searched"] is False and "stored sources are on topic" in fetch["reason"], fetch
    assert esearches(stack, HELD_QUESTION) == 0
    assert {f"pubmed:{p}" for p in HELD_PMIDS} <= {s["document_id"] for s in body["sources"]}


def test_the_same_question_uses_the_cached_search(stack: Stack, served: None) -> None:
    before = esearches(stack, FETCHED[1])
    assert before >= 1
    with stack.http() as http:
        body = http.post("/v1/ask", json={"question": FETCHED[1], "fetch": "always"}).json()
    fetch = body["fetch"]
    assert fetch["cached"] and fetch["found"] == 3 and esearches(stack, FETCHED[1]) == before
    assert fetch["ingested"] == [] and fetch["already_stored"] >= 1  # nothing new to fetch
    assert f"pubmed:{FETCHED[0]}" in {s["document_id"] for s in body["sources"]}


def test_the_stream_reports_the_fetch_as_it_runs(stack: Stack, served: None) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    with (
        stack.http() as http,
        http.stream("POST", "/v1/ask/stream", json={"question": STREAMED[1], "fetch": "always"}) as r,
    ):
        assert r.status_code == 200
        kind = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    kinds = [k for k, _ in events]
    progress = [d for k, d in events if k == "fetch"]
    assert kinds.index("retrieval_done") > max(i for i, k in enumerate(kinds) if k == "fetch")
    stages = [p["stage"] for p in progress]
    assert stages[:2] == ["searching", "found"] and stages[-1] == "done", stages
    assert progress[1]["found"] == 3 and progress[1]["new"] == 2  # one of its distractors came with FETCHED
    embedded = [p for p in progress if p["stage"] == "embedded"]
    assert embedded and embedded[-1]["of"] == 2 and embedded[-1]["embedded"] >= 1
    assert [p["embedded"] for p in embedded] == sorted(p["embedded"] for p in embedded)  # counted up
    done = dict(events)["retrieval_done"]
    assert done["fetch"]["already_stored"] == 1
    assert f"pubmed:{STREAMED[0]}" in done["fetch"]["ingested"]
    assert f"pubmed:{STREAMED[0]}" in {s["document_id"] for s in done["sources"]}
    assert kinds[-1] == "done"


def test_a_key_without_ingest_gets_403_for_always_and_the_store_for_auto(stack: Stack, served: None) -> None:
    reader = "live-fetch-reader-0123456789"
    env = {"EVIDENTIA_GATEWAY_API_KEY_HASHES": hashlib.sha256(reader.encode()).hexdigest()}
    with (
        extra_gateway(stack, "fetch-scopes", env) as url,
        httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {reader}"}) as http,
    ):
        r = http.post("/v1/ask", json={"question": NEVER[1], "fetch": "always"})
        assert r.status_code == 403 and "`ingest` scope" in r.json()["detail"]
        assert http.post("/v1/ask/stream", json={"question": NEVER[1], "fetch": "always"}).status_code == 403
        body = http.post("/v1/ask", json={"question": NEVER[1], "fetch": "auto"}).json()
        assert body["fetch"]["mode"] == "never" and "`ingest` scope" in body["fetch"]["reason"]
    assert esearches(stack, NEVER[1]) == 0


def test_a_refusing_ncbi_answers_from_the_store_at_once_and_says_why(stack: Stack, served: None) -> None:
    # NCBI rate-limits for longer than the fetcher waits (Retry-After over EVIDENTIA_NCBI_RETRY_AFTER_MAX_S):
    # the search fails at once, and so does the question's fetch.
    stack.fake.fail_next(429, count=1, retry_after=3600.0, utility="esearch")
    t0 = time.monotonic()
    request = {"question": REFUSED, "fetch": "always"}
    with stack.http() as http:
        r = http.post("/v1/ask", json=request)
    elapsed = time.monotonic() - t0
    capture(request, r, "ask: NCBI refusing")
    body = r.json()
    fetch = body["fetch"]
    assert fetch["searched"] is False and fetch["job_id"] is None and fetch["ingested"] == []
    assert "could not be searched" in fetch["reason"] and "answered from the store" in fetch["reason"]
    assert fetch["waited_ms"] < 10_000 and elapsed < 20  # not the 20 s budget
    assert body["answer"]
