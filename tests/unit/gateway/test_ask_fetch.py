"""``fetch`` on ``/v1/ask``: the decision (mode, scopes, relevance floor), the PubMed query and its relaxation,
the fetch's search/ingest/wait within the budget, and the routes (403, the report, the stream's progress)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.gateway.intelligence.cache import MemoryCache
from services.gateway.livefetch.plan import (
    MIN_SOURCES,
    NO_SCOPE,
    FetchNotAllowed,
    plan_fetch,
    relevant_sources,
    should_search,
)
from services.gateway.livefetch.query import MAX_TERMS, pubmed_query, question_terms, relaxed_queries
from services.gateway.livefetch.runner import LiveFetcher
from services.gateway.security import key_digest
from shared.settings import AskFetchSettings, GatewaySettings, LlmSettings, Settings
from tests.fakes.llm_steps import step_llm
from tests.unit.gateway.conftest import HITS, FakePubmed, build_app, client, hit

READER, INGESTER = "reader-key-1234567890", "ingester-key-0987654321"
QUESTION = "Does vitamin D supplementation prevent fractures in elderly women?"
TERMS = ["vitamin", "supplementation", "prevent", "fractures", "elderly", "women"]


# --- the decision -----------------------------------------------------------------------------------------


def test_the_default_is_auto_for_a_key_that_may_ingest_and_never_otherwise() -> None:
    assert plan_fetch(None, True).mode == "auto"
    assert plan_fetch("never", True).mode == "never"
    assert plan_fetch("always", True).mode == "always"
    no_scope = plan_fetch(None, False)
    assert (no_scope.mode, no_scope.note) == ("never", NO_SCOPE)
    auto = plan_fetch("auto", False)
    assert (auto.mode, auto.requested, auto.note) == ("never", "auto", NO_SCOPE)
    assert plan_fetch("never", False).note is None  # asked for: nothing to explain
    with pytest.raises(FetchNotAllowed, match="`ingest` scope"):
        plan_fetch("always", False)


def test_the_operator_s_default_applies_to_questions_that_name_no_mode() -> None:
    assert plan_fetch(None, True, "never").mode == "never"
    assert plan_fetch("auto", True, "never").mode == "auto"  # asked for: the question's own choice
    assert plan_fetch(None, False, "auto").mode == "never"  # no `ingest` scope: never, whatever the default
    assert Settings().ask_fetch.default == "auto"


def test_auto_searches_when_fewer_than_three_sources_clear_the_floor() -> None:
    floor = 0.5
    strong = [hit(p, "text", i, dense_score=0.9) for i, p in enumerate(["1", "2", "3"], 1)]
    assert relevant_sources(strong, floor) == MIN_SOURCES
    assert should_search("auto", strong, floor)[0] is False
    two_docs = [*strong[:2], hit("2", "more of 2", 4, chunk_suffix="#h#1", dense_score=0.9)]
    assert relevant_sources(two_docs, floor) == 2  # sources, not passages
    assert should_search("auto", two_docs, floor)[0] is True
    weak = [*strong[:2], hit("3", "text", 3, dense_score=0.1)]
    wanted, why = should_search("auto", weak, floor)
    assert wanted and "only 2" in why
    lexical = [*strong[:2], hit("4", "text", 3, dense_score=None)]  # lexical-only hits pass the floor
    assert should_search("auto", lexical, floor)[0] is False
    assert should_search("always", strong, floor)[0] is True
    assert should_search("never", [], floor)[0] is False


# --- the query --------------------------------------------------------------------------------------------


def test_the_query_ands_the_content_words_and_relaxes_by_dropping_terms() -> None:
    terms = question_terms(QUESTION)
    assert terms == TERMS
    assert pubmed_query(["vitamin d", "fractures"]) == '"vitamin d" AND fractures'
    assert relaxed_queries(terms) == [
        "vitamin AND supplementation AND prevent AND fractures AND elderly AND women",
        "vitamin AND supplementation AND prevent AND fractures AND elderly",
        "vitamin AND supplementation AND prevent",
    ]
    assert relaxed_queries(["aspirin"]) == ["aspirin"]
    assert relaxed_queries([]) == []
    long = " ".join(f"word{i}x" for i in range(20))
    assert len(question_terms(long)) == MAX_TERMS


# --- the fetch --------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.now += max(s, 0.01)


def fetcher(pubmed: FakePubmed, clock: Clock, **fetch: Any) -> LiveFetcher:
    settings = Settings(ask_fetch=AskFetchSettings(**fetch))  # type: ignore[call-arg]
    return LiveFetcher(
        pubmed,
        settings,
        MemoryCache(),
        step_llm(LlmSettings()),  # type: ignore[call-arg]
        clock=clock,
        sleep=clock.sleep,
    )


async def test_a_fetch_relaxes_ingests_only_new_records_up_to_the_cap_and_caches_the_search() -> None:
    relaxed = relaxed_queries(TERMS)[1]
    pmids = [str(900 + i) for i in range(6)]
    pubmed = FakePubmed({relaxed: pmids}, stored={"pubmed:900"})
    clock = Clock()
    live = fetcher(pubmed, clock, max_documents=3)
    report = await live.run(TERMS, "t", "auto", None, "too few")
    assert pubmed.queries == relaxed_queries(TERMS)[:2]  # the full query found nothing: relaxed once
    assert (report.query, report.found, report.already_stored) == (relaxed, 6, 1)
    assert pubmed.ingested == [["901", "902", "903"]]  # new ones only, at most max_documents
    assert report.ingested == ["pubmed:901", "pubmed:902", "pubmed:903"] and report.pending == []
    assert report.job_id == "job-1" and not report.cached
    again = await live.run(TERMS, "t", "auto", None, "too few")
    assert again.cached and pubmed.queries == relaxed_queries(TERMS)[:2]  # no new search
    assert pubmed.ingested[1] == ["904", "905"]  # the rest of the best matches, the next time


async def test_records_not_searchable_within_the_budget_are_pending() -> None:
    q = relaxed_queries(TERMS)[0]
    pubmed = FakePubmed({q: ["1", "2"]}, slow={"2"})
    clock = Clock()
    events: list[dict[str, Any]] = []

    async def progress(e: dict[str, Any]) -> None:
        events.append(e)

    report = await fetcher(pubmed, clock, budget_s=3).run(TERMS, "t", "always", "always", "fetch: always", progress)
    assert report.ingested == ["pubmed:1"] and report.pending == ["pubmed:2"]
    assert 3000 <= report.waited_ms < 3500  # waited out the budget, no longer
    assert [e["stage"] for e in events] == ["searching", "found", "embedded"]
    assert events[-1] == {"stage": "embedded", "embedded": 1, "of": 2, "job_id": "job-1"}


async def test_an_unreachable_pubmed_ingests_nothing_and_says_why_without_caching() -> None:
    pubmed = FakePubmed({relaxed_queries(TERMS)[0]: ["1"]}, down=True)
    clock = Clock()
    live = fetcher(pubmed, clock)
    report = await live.run(TERMS, "t", "auto", None, "too few")
    assert not report.searched and pubmed.ingested == [] and report.job_id is None
    assert report.reason is not None and "did not answer" in report.reason and "from the store" in report.reason
    assert len(pubmed.queries) == 1  # not relaxed: PubMed is down, not empty
    pubmed.down = False
    assert (await live.run(TERMS, "t", "auto", None, "too few")).ingested == ["pubmed:1"]  # nothing was cached


# --- the routes -------------------------------------------------------------------------------------------


def scoped() -> GatewaySettings:
    return GatewaySettings(api_key_hashes=f"{key_digest(READER)}, {key_digest(INGESTER)}:ingest")  # type: ignore[call-arg]


async def test_without_the_ingest_scope_always_is_403_and_auto_acts_as_never() -> None:
    pubmed = FakePubmed({relaxed_queries(TERMS)[0]: ["1"]})
    app, _, _ = build_app(gateway=scoped(), hits=HITS[:1], pubmed=pubmed)
    async with client(app, READER) as reader:
        r = await reader.post("/v1/ask", json={"question": QUESTION, "fetch": "always"})
        assert r.status_code == 403 and "`ingest` scope" in r.json()["detail"]
        r = await reader.post("/v1/ask/stream", json={"question": QUESTION, "fetch": "always"})
        assert r.status_code == 403
        body = (await reader.post("/v1/ask", json={"question": QUESTION, "fetch": "auto"})).json()
        assert body["fetch"]["mode"] == "never" and body["fetch"]["reason"] == NO_SCOPE
    assert pubmed.queries == []


async def test_auto_fetches_when_the_store_has_too_little_and_answers_from_the_new_records() -> None:
    q = relaxed_queries(TERMS)[0]
    pubmed = FakePubmed({q: ["777"]})
    app, kafka, _ = build_app(gateway=scoped(), hits=HITS[:1], pubmed=pubmed)
    new = hit("777", "Vitamin D supplementation reduced hip fractures in elderly women.", 1)
    pubmed.on_ingest.append(lambda pmids: kafka.hits.insert(0, new))  # searchable once embedded
    async with client(app, INGESTER) as ingester:
        body = (await ingester.post("/v1/ask", json={"question": QUESTION})).json()
        assert body["fetch"]["mode"] == "auto" and body["fetch"]["ingested"] == ["pubmed:777"]
        assert "pubmed:777" in {s["document_id"] for s in body["sources"]}
        assert len(kafka.retrievals) == 2  # the store, then again with the new record
        assert body["timings_ms"]["fetch"] >= 0 and body["timings_ms"]["retrieval"] >= 0
        never = (await ingester.post("/v1/ask", json={"question": QUESTION, "fetch": "never"})).json()
        assert never["fetch"]["searched"] is False and len(pubmed.queries) == 1
        always = (await ingester.post("/v1/ask", json={"question": QUESTION, "fetch": "always"})).json()
        assert always["fetch"]["cached"] and always["fetch"]["ingested"] == []  # nothing new: stored already
        assert always["timings_ms"]["retrieval"] >= 0 and "fetch" in always["timings_ms"]
        assert len(pubmed.queries) == 1  # the cached search


async def test_the_stream_sends_fetch_progress_before_retrieval_done() -> None:
    q = relaxed_queries(TERMS)[0]
    pubmed = FakePubmed({q: ["777", "778"]})
    app, _, _ = build_app(gateway=scoped(), hits=HITS[:1], pubmed=pubmed)
    async with client(app, INGESTER) as ingester:
        r = await ingester.post("/v1/ask/stream", json={"question": QUESTION, "fetch": "always"})
    events = [
        (block.split("\n")[0].removeprefix("event: "), json.loads(block.split("data: ", 1)[1]))
        for block in r.text.strip().split("\n\n")
        if block.startswith("event: ")
    ]
    names = [n for n, _ in events]
    assert names.index("retrieval_done") > max(i for i, n in enumerate(names) if n == "fetch")
    stages = [d["stage"] for n, d in events if n == "fetch"]
    assert stages[:2] == ["searching", "found"] and stages[-1] == "done"
    assert {"stage": "embedded", "embedded": 2, "of": 2, "job_id": "job-1"} in [d for n, d in events if n == "fetch"]
    done = dict(events)["retrieval_done"]
    assert done["fetch"]["ingested"] == ["pubmed:777", "pubmed:778"] and done["fetch"]["mode"] == "always"
    assert names[-1] == "done"


# --- the CLI ----------------------------------------------------------------------------------------------


def test_the_cli_sends_fetch_and_shows_its_progress_and_report(capsys: pytest.CaptureFixture[str]) -> None:
    from cli import exits
    from cli.main import main
    from tests.unit.gateway.test_cli_against_gateway import serve

    pubmed = FakePubmed({relaxed_queries(TERMS)[0]: ["777"]})
    app, _, _ = build_app(gateway=scoped(), hits=HITS[:1], pubmed=pubmed)
    with serve(app) as url:
        rc = main(["--gateway-url", url, "--api-key", INGESTER, "ask", QUESTION, "--fetch", "always"])
        captured = capsys.readouterr()
        assert rc == exits.OK, captured.err
        assert "searching PubMed: 'vitamin AND supplementation" in captured.err
        assert "embedded 1 of 1" in captured.err
        assert "PubMed (always): 'vitamin AND" in captured.out and "1 fetched and searched" in captured.out
        rc = main(["--gateway-url", url, "--api-key", READER, "ask", QUESTION, "--fetch", "always", "--no-stream"])
        assert rc != exits.OK  # 403: a read key may not fetch
        rc = main(["--gateway-url", url, "--api-key", READER, "ask", QUESTION, "--fetch", "never", "--json"])
        assert rc == exits.OK
        assert json.loads(capsys.readouterr().out)["fetch"]["searched"] is False
    assert pubmed.ingested == [["777"]]
