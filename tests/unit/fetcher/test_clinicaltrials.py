"""ClinicalTrials.gov as a source, against the fake of its API v2 (tests/fakes/clinicaltrials_server.py):
searches paged by token, studies fetched in batches by NCT number, and the politeness rules (the limiter on
every call, 429 with ``Retry-After`` waited for, a 400 reported with the registry's reason, never retried)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from services.fetcher.clinicaltrials import (
    ClinicalTrialsClient,
    ClinicalTrialsQueryError,
    ClinicalTrialsUnavailable,
    StudySearch,
)
from services.fetcher.sources.clinicaltrials import FORMAT, ClinicalTrialsSource
from shared.events import DocumentFetched, SourceRequest
from shared.settings import ClinicalTrialsSettings
from tests.fakes.clinicaltrials_server import FakeClinicalTrials, load_fixture


class CountingLimiter:
    def __init__(self) -> None:
        self.calls = 0

    async def acquire(self) -> None:
        self.calls += 1


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
def fake() -> Iterator[FakeClinicalTrials]:
    with FakeClinicalTrials() as server:
        server.add_fixture("NCT04000001")
        server.add_fixture("NCT05000002")
        for n in range(3, 8):  # more metformin studies, to page through
            study = json.loads(json.dumps(load_fixture("NCT05000002")))
            study["protocolSection"]["identificationModule"]["nctId"] = f"NCT0600000{n}"
            server.add_study(study)
        yield server


def client_for(
    fake: FakeClinicalTrials, limiter: CountingLimiter, sleeps: Sleeps, **settings: object
) -> ClinicalTrialsClient:
    conf = ClinicalTrialsSettings(base_url=fake.base_url, **settings)  # type: ignore[arg-type]
    return ClinicalTrialsClient(conf, limiter=limiter, sleep=sleeps)


async def test_a_search_follows_the_page_tokens_to_its_cap(fake: FakeClinicalTrials) -> None:
    limiter, sleeps = CountingLimiter(), Sleeps()
    client = client_for(fake, limiter, sleeps, page_size=2)
    try:
        found = await client.search(StudySearch(term="metformin"), max_results=5)
        everything = await client.search(StudySearch(condition="obesity", intervention="semaglutide"), 100)
    finally:
        await client.aclose()
    assert found == ["NCT04000001", "NCT05000002", "NCT06000003", "NCT06000004", "NCT06000005"]
    assert len(everything) == 6 and "NCT04000001" not in everything  # only the obesity studies
    first, second, third = fake.requests[:3]
    assert first[1]["query.term"] == ["metformin"] and "pageToken" not in first[1]
    assert second[1]["pageToken"] == ["tok1"] and third[1]["pageSize"] == ["1"]  # the last page asks for what is left
    assert first[1]["fields"] == ["protocolSection.identificationModule.nctId"]
    last = fake.requests[3][1]
    assert last["query.cond"] == ["obesity"] and last["query.intr"] == ["semaglutide"]
    assert limiter.calls == len(fake.requests) and not sleeps.delays


async def test_studies_come_in_batches_and_the_missing_ones_are_named(fake: FakeClinicalTrials) -> None:
    client = client_for(fake, CountingLimiter(), Sleeps(), page_size=2)
    try:
        batches = [b async for b in client.studies(["NCT04000001", "NCT09999999", "NCT05000002"])]
    finally:
        await client.aclose()
    assert [list(b.studies) for b in batches] == [["NCT04000001"], ["NCT05000002"]]
    assert batches[0].missing == ["NCT09999999"]
    assert json.loads(batches[0].studies["NCT04000001"])["hasResults"] is True
    assert fake.requests[0][1]["filter.ids"] == ["NCT04000001,NCT09999999"]


async def test_a_429_is_waited_for_as_long_as_its_retry_after_says(fake: FakeClinicalTrials) -> None:
    limiter, sleeps = CountingLimiter(), Sleeps()
    fake.throttle(2, retry_after="7")
    client = client_for(fake, limiter, sleeps, backoff_base_s=0.01)
    try:
        assert await client.search(StudySearch(term="placebo"), 10) == ["NCT04000001"]
    finally:
        await client.aclose()
    assert sleeps.delays == [7.0, 7.0] and limiter.calls == 3  # each attempt takes its own token


async def test_a_retry_after_longer_than_allowed_fails_at_once(fake: FakeClinicalTrials) -> None:
    fake.throttle(1, retry_after="3600")
    sleeps = Sleeps()
    client = client_for(fake, CountingLimiter(), sleeps, retry_after_max_s=60)
    try:
        with pytest.raises(ClinicalTrialsUnavailable, match="Retry-After 3600s"):
            await client.search(StudySearch(term="placebo"), 10)
    finally:
        await client.aclose()
    assert sleeps.delays == []


async def test_server_errors_are_retried_then_reported_as_an_outage(fake: FakeClinicalTrials) -> None:
    fake.fail(10, status=503)
    sleeps = Sleeps()
    client = client_for(fake, CountingLimiter(), sleeps, max_retries=2, backoff_base_s=1.0, backoff_max_s=1.5)
    try:
        with pytest.raises(ClinicalTrialsUnavailable, match="gave up after 3 attempts: HTTP 503"):
            await client.search(StudySearch(term="placebo"), 10)
    finally:
        await client.aclose()
    assert len(sleeps.delays) == 2 and all(0.5 <= d <= 1.5 for d in sleeps.delays)


async def test_a_refused_request_carries_the_registry_s_reason_and_is_not_retried(fake: FakeClinicalTrials) -> None:
    sleeps = Sleeps()
    client = client_for(fake, CountingLimiter(), sleeps)
    try:
        with pytest.raises(ClinicalTrialsQueryError) as refused:
            await client.get_json("studies", {"pageToken": "forged", "pageSize": "5"})
    finally:
        await client.aclose()
    assert str(refused.value).endswith(f"(HTTP 400): {load_fixture('error_400')['message']}")
    assert len(fake.requests) == 1 and sleeps.delays == []


async def test_the_source_discovers_by_search_and_ids_and_fetches_one_document_a_study(
    fake: FakeClinicalTrials,
) -> None:
    settings = ClinicalTrialsSettings(base_url=fake.base_url, max_results=2)
    client = ClinicalTrialsClient(settings, limiter=CountingLimiter(), sleep=Sleeps())
    reported: list[dict[str, str]] = []

    async def on_missing(problems: dict[str, str]) -> None:
        reported.append(problems)

    source = ClinicalTrialsSource(client, settings, on_missing=on_missing)
    try:
        request = SourceRequest(
            source="clinicaltrials", query="metformin", ids=["nct06000007", "NCT123", "NCT04000001", "NCT09999999"]
        )
        units = await source.discover(request, max_results=50, refresh=False)
        events = [e async for e in source.fetch(units, job_id="j1", trace_id="t1")]
    finally:
        await client.aclose()
    # the search capped at the source's max_results, then the given ids (canonical, deduplicated, valid)
    assert units == ["NCT04000001", "NCT05000002", "NCT06000007", "NCT09999999"]
    assert [e.document_id for e in events] == [
        "clinicaltrials:NCT04000001",
        "clinicaltrials:NCT05000002",
        "clinicaltrials:NCT06000007",
    ]
    first = events[0]
    assert isinstance(first, DocumentFetched) and first.format == FORMAT and first.job_id == "j1"
    assert first.trace_id == "t1" and source.identify(first) == ["clinicaltrials:NCT04000001"]
    assert reported == [{"NCT09999999": "not found at ClinicalTrials.gov"}]


async def test_a_request_by_condition_alone_is_a_search() -> None:
    request = SourceRequest(source="clinicaltrials", options={"condition": "asthma"})
    assert request.query is None and request.options["condition"] == "asthma"
    with pytest.raises(ValueError, match="needs a query, ids"):
        SourceRequest(source="clinicaltrials", options={"condition": ""})
