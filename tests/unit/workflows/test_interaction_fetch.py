"""The drug interaction check's question-time fetch: who may have it (the live fetch's rule), the bounded wait for
the FDA labels it fetched from openFDA and the reason a label that did not come is not read, the PubMed search of
the pair, and the check reading what was fetched."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from services.gateway.intelligence.cache import MemoryCache
from services.gateway.intelligence.interactions import InteractionChecker
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.livefetch.interaction import InteractionFetch, interaction_fetch, pair_terms
from services.gateway.livefetch.labels import LABELS_PER_DRUG, LabelFetcher
from services.gateway.livefetch.plan import plan_fetch
from services.gateway.livefetch.runner import LiveFetcher
from shared.db.jobs import JobStatus
from shared.models import ParsedDocument, SearchHit
from shared.settings import LlmSettings, Settings
from shared.sources.fdalabel_document import label_document
from tests.fakes.clock import FakeClock
from tests.fakes.llm_steps import step_llm
from tests.fakes.openfda_server import load
from tests.fakes.rxnav_server import FakeRxNav
from tests.unit.workflows.conftest import build, client, pubmed_hit
from tests.unit.workflows.test_interaction_check import Store

WARFARIN_SET = "d2a1e8f4-2c3b-4e0a-9a51-6f0c2b7d9e11"
LABELS = {d.source_id: d for d in (label_document(x) for x in load("labels.json"))}
WARFARIN, FLUCONAZOLE = LABELS[WARFARIN_SET], LABELS["3f8b2a90-51c4-4d6e-b7a2-1c9e0d4f5a33"]


class LabelJobs:
    """openFDA behind the ingestion pipeline: a job stores the labels of the drugs it names (into ``store``)
    after ``polls`` status reads, or ends ``failed`` with ``error``; ``refuse``: no job can be started."""

    def __init__(
        self,
        store: Store | None = None,
        served: Sequence[ParsedDocument] = (),
        *,
        polls: int = 1,
        error: str | None = None,
        refuse: bool = False,
    ) -> None:
        self.store, self.served, self.polls, self.error, self.refuse = store, list(served), polls, error, refuse
        self.jobs: list[tuple[list[str], int]] = []
        self.reads = 0

    async def ingest_labels(self, drugs: Sequence[str], per_drug: int, trace_id: str) -> str:
        if self.refuse:
            raise ConnectionError("kafka down")
        self.jobs.append((list(drugs), per_drug))
        return "job-1"

    async def job(self, job_id: str) -> JobStatus | None:
        self.reads += 1
        if self.reads < self.polls:
            return JobStatus(job_id=job_id, kind="query", state="running", total=0)
        if self.error is not None:
            return JobStatus(job_id=job_id, kind="query", state="failed", total=0, error=self.error)
        wanted = {d.lower() for d in self.jobs[-1][0]}
        found = [d for d in self.served if d.drug_label and wanted & set(d.drug_label.match_terms)]
        if self.store is not None:
            self.store.labels += [d for d in found if d not in self.store.labels]
        return JobStatus(
            job_id=job_id, kind="query", state="discovered", total=len(found), counts={"embedded": len(found)}
        )


class Pubmed:
    """PubMed at question time: ``records`` found for their query; ingesting one puts its hit in ``store``."""

    def __init__(self, store: Store, records: dict[str, SearchHit]) -> None:
        self.store, self.records = store, records
        self.terms: list[str] = []
        self.stage: dict[str, str] = {}

    async def search_pubmed(self, term: str, max_ids: int, trace_id: str, timeout_s: float) -> tuple[int, list[str]]:
        self.terms.append(term)
        hit = self.records.get(term)
        return (1, [hit.source_id]) if hit else (0, [])

    async def unstored(self, document_ids: Sequence[str]) -> list[str]:
        return [d for d in document_ids if d not in self.stage]

    async def ingest_pmids(self, pmids: Sequence[str], trace_id: str) -> str:
        for hit in self.records.values():
            if hit.source_id in pmids:
                self.stage[hit.document_id] = "embedded"
                self.store.literature.append(hit)
        return "pmid-job"

    async def stages(self, document_ids: Sequence[str]) -> dict[str, str]:
        return {d: self.stage[d] for d in document_ids if d in self.stage}


@pytest.fixture
def rxnav() -> Iterator[FakeRxNav]:
    with FakeRxNav() as fake:
        fake.add_drug("warfarin", "11289", brands=["Coumadin"], classes=["Vitamin K Antagonist"])
        fake.add_drug("fluconazole", "4450", brands=["Diflucan"], classes=["Azole Antifungal"])
        yield fake


def fetcher(jobs: LabelJobs, clock: FakeClock, wait_s: float = 10.0) -> LabelFetcher:
    return LabelFetcher(jobs, wait_s, clock=clock, sleep=clock.sleep, poll_s=0.5)


def live(pubmed: Pubmed) -> LiveFetcher:
    return LiveFetcher(pubmed, Settings(), MemoryCache(), step_llm(LlmSettings()))  # type: ignore[call-arg]


def test_only_a_plan_that_may_fetch_gets_the_fetch() -> None:
    labels = fetcher(LabelJobs(), FakeClock())
    assert interaction_fetch(plan_fetch(None, True, "auto"), labels, None) is not None
    assert interaction_fetch(plan_fetch("always", True), labels, None) is not None
    assert interaction_fetch(plan_fetch("never", True), labels, None) is None  # asked for the store only
    assert interaction_fetch(plan_fetch(None, True, "never"), labels, None) is None  # the deployment's default
    assert interaction_fetch(plan_fetch("auto", False), labels, None) is None  # no `ingest` scope
    assert interaction_fetch(plan_fetch(None, False, "auto"), labels, None) is None
    assert interaction_fetch(plan_fetch(None, True, "auto"), None, None) is None  # no label fetch wired


def test_the_pair_is_one_clause_never_relaxed_to_one_drug() -> None:
    assert pair_terms(["Warfarin", "metronidazole"]) == ["(warfarin AND metronidazole)"]
    assert pair_terms(["warfarin", "acetylsalicylic acid"]) == ['(warfarin AND "acetylsalicylic acid")']
    assert pair_terms(["warfarin", " "]) == []


async def test_the_wait_ends_when_the_job_is_done() -> None:
    clock = FakeClock()
    jobs = LabelJobs(served=[WARFARIN], polls=3)
    got = await fetcher(jobs, clock).fetch(["warfarin"], "t")
    assert jobs.jobs == [(["warfarin"], LABELS_PER_DRUG)]
    assert got.done and got.state == "done" and got.job_id == "job-1"
    assert clock.now == 1.0 and got.waited_ms == 1000.0  # two polls of 0.5 s, not the 10 s bound
    assert got.why_missing() == "openFDA returned no label for it"


async def test_the_wait_is_bounded_and_a_late_label_is_said() -> None:
    clock = FakeClock()
    got = await fetcher(LabelJobs(polls=10_000), clock, wait_s=3.0).fetch(["warfarin"], "t")
    assert not got.done and got.state == "running"
    assert clock.now == pytest.approx(3.0) and sum(clock.slept) == pytest.approx(3.0)
    assert "not fetched within 3 s" in got.why_missing() and "job-1 still running" in got.why_missing()
    zero = await fetcher(LabelJobs(polls=10_000), FakeClock(), wait_s=0.0).fetch(["warfarin"], "t")
    assert not zero.done and zero.waited_ms == 0.0


async def test_an_unreachable_openfda_or_pipeline_is_the_reason() -> None:
    failed = await fetcher(LabelJobs(error="openFDA unreachable: ConnectError"), FakeClock()).fetch(["warfarin"], "t")
    assert failed.state == "failed" and failed.done
    assert failed.why_missing() == "openFDA could not be searched for its label (openFDA unreachable: ConnectError)"
    refused = await fetcher(LabelJobs(refuse=True), FakeClock()).fetch(["warfarin"], "t")
    assert refused.job_id is None and "ConnectionError: kafka down" in refused.why_missing()


def checker(rxnav: FakeRxNav, store: Store, fetch: InteractionFetch | None) -> InteractionChecker:
    return InteractionChecker(RxNavClient(rxnav.url), store.retrieve, trace_id="t", fetch=fetch)


async def test_a_label_fetched_at_question_time_is_read(rxnav: FakeRxNav) -> None:
    store = Store([FLUCONAZOLE])  # warfarin's label is only at openFDA; it is the one naming fluconazole
    jobs = LabelJobs(store, [WARFARIN, FLUCONAZOLE])
    fetch = interaction_fetch(plan_fetch(None, True, "auto"), fetcher(jobs, FakeClock()), None)
    check = await checker(rxnav, store, fetch).check(["warfarin", "fluconazole"])
    assert jobs.jobs == [(["warfarin"], LABELS_PER_DRUG)]  # only the missing drug, by its RxNorm name
    assert check.status == "found" and not check.missing and check.missing_reasons == {}
    [finding] = check.findings
    assert (finding.label_of, finding.other, finding.hit.citation_id) == (
        "warfarin",
        "fluconazole",
        f"FDA:{WARFARIN_SET}",
    )
    assert check.label_fetch is not None and check.label_fetch.done
    # the same question from a caller that may not fetch: today's answer
    stored_only = Store([FLUCONAZOLE])
    never = await checker(rxnav, stored_only, None).check(["warfarin", "fluconazole"])
    assert never.status == "none_found" and never.missing == ["warfarin"] and never.label_fetch is None
    assert "no FDA label is stored" in never.missing_reasons["warfarin"]


async def test_a_label_that_did_not_come_stays_missing_with_the_reason(rxnav: FakeRxNav) -> None:
    store = Store([FLUCONAZOLE])
    late = interaction_fetch(
        plan_fetch(None, True, "auto"), fetcher(LabelJobs(store, [WARFARIN], polls=10_000), FakeClock(), 2.0), None
    )
    check = await checker(rxnav, store, late).check(["warfarin", "fluconazole"])
    assert check.status == "none_found"  # fluconazole's label was read and names neither: honest, not "found"
    assert check.missing == ["warfarin"] and "not fetched within 2 s" in check.missing_reasons["warfarin"]
    assert "The FDA label of warfarin was not read: its FDA label was not fetched within 2 s" in check.text()
    nothing = Store([])
    none = interaction_fetch(plan_fetch(None, True, "auto"), fetcher(LabelJobs(nothing, []), FakeClock()), None)
    empty = await checker(rxnav, nothing, none).check(["warfarin", "fluconazole"])
    assert empty.status == "not_checked" and empty.reason == (
        "no FDA label is stored for warfarin or fluconazole, and none could be fetched from openFDA"
    )
    assert empty.missing_reasons == {d: "openFDA returned no label for it" for d in ("warfarin", "fluconazole")}


async def test_the_literature_on_the_pair_is_fetched_when_the_store_has_none(rxnav: FakeRxNav) -> None:
    store = Store([WARFARIN, FLUCONAZOLE])
    paper = pubmed_hit("39990001", "Fluconazole and warfarin", "Fluconazole raised the INR of warfarin users.", 1)
    pubmed = Pubmed(store, {"(warfarin AND fluconazole)": paper})
    fetch = interaction_fetch(plan_fetch(None, True, "auto"), fetcher(LabelJobs(store), FakeClock()), live(pubmed))
    check = await checker(rxnav, store, fetch).check(["warfarin", "fluconazole"])
    assert pubmed.terms == ["(warfarin AND fluconazole)"]
    assert check.literature_fetch is not None and check.literature_fetch.ingested == ["pubmed:39990001"]
    assert [h.citation_id for h in check.literature] == ["PMID:39990001"]
    again = await checker(rxnav, store, fetch).check(["warfarin", "fluconazole"])  # now stored: no search
    assert again.literature_fetch is None and pubmed.terms == ["(warfarin AND fluconazole)"]


async def test_query_route_fetches_a_missing_label_under_the_default_mode() -> None:
    with FakeRxNav() as rx:
        rx.add_drug("warfarin", "11289", brands=["Coumadin"], classes=["Vitamin K Antagonist"])
        rx.add_drug("fluconazole", "4450", brands=["Diflucan"], classes=["Azole Antifungal"])
        app, _, backend = build(rxnav_url=rx.url)
        backend.labels, backend.openfda = [FLUCONAZOLE], [WARFARIN]
        async with client(app) as http:
            body = (await http.post("/v1/query", json={"question": "Does warfarin interact with fluconazole?"})).json()
    check = body["interaction"]
    assert backend.label_jobs == [["warfarin"]]
    assert check["status"] == "found" and check["missing_labels"] == []
    assert check["findings"][0]["citation_id"] == f"FDA:{WARFARIN_SET}"
    assert check["label_fetch"]["job_id"] == "label-job-1" and check["label_fetch"]["done"] is True


async def test_query_route_takes_the_fetch_the_request_names() -> None:
    import hashlib

    from shared.settings import GatewaySettings

    reader = hashlib.sha256(b"reader-key").hexdigest()
    with FakeRxNav() as rx:
        rx.add_drug("warfarin", "11289", brands=["Coumadin"], classes=["Vitamin K Antagonist"])
        rx.add_drug("fluconazole", "4450", brands=["Diflucan"], classes=["Azole Antifungal"])
        app, _, backend = build(rxnav_url=rx.url, gateway=GatewaySettings(api_key_hashes=reader))
        backend.labels, backend.openfda = [FLUCONAZOLE], [WARFARIN]
        question = "Does warfarin interact with fluconazole?"
        async with client(app, "reader-key") as http:
            refused = await http.post("/v1/query", json={"question": question, "fetch": "always"})
            read_only = (await http.post("/v1/query", json={"question": question, "fetch": "auto"})).json()
        assert refused.status_code == 403 and "`ingest` scope" in refused.json()["detail"]
        assert read_only["interaction"]["missing_labels"] == ["warfarin"] and backend.label_jobs == []
        app, _, backend = build(rxnav_url=rx.url)  # no keys: every scope
        backend.labels, backend.openfda = [FLUCONAZOLE], [WARFARIN]
        async with client(app) as http:
            never = (await http.post("/v1/query", json={"question": question, "fetch": "never"})).json()
            assert never["interaction"]["missing_labels"] == ["warfarin"] and backend.label_jobs == []
            fetched = (await http.post("/v1/query", json={"question": question, "fetch": "always"})).json()
    assert backend.label_jobs == [["warfarin"]] and fetched["interaction"]["status"] == "found"
