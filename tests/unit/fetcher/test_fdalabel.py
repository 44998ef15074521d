"""FDA drug labels as a source, against the fake openFDA label endpoint: searching and paging, openFDA's
errors and rate limit, discovery by name, search expression and set id, one document-json event per label."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.fetcher.openfda import OpenFdaClient, OpenFdaRefused, OpenFdaUnavailable
from services.fetcher.ratelimit import TokenBucket
from services.fetcher.sources.fdalabel import FdaLabelSource, search_expression
from shared.events import SourceRequest
from shared.settings import OpenFdaSettings
from tests.fakes.eutils_server import SleepRecorder
from tests.fakes.openfda_server import FakeOpenFda, load

WARFARIN_SET = "d2a1e8f4-2c3b-4e0a-9a51-6f0c2b7d9e11"
FLUCONAZOLE_SET = "3f8b2a90-51c4-4d6e-b7a2-1c9e0d4f5a33"


@pytest.fixture
def fake() -> Iterator[FakeOpenFda]:
    with FakeOpenFda() as server:
        yield server


def _client(fake: FakeOpenFda, sleep: SleepRecorder | None = None, **overrides: Any) -> OpenFdaClient:
    settings = OpenFdaSettings(url=fake.url, **{"max_retries": 2, "backoff_base_s": 0.01, **overrides})
    return OpenFdaClient(settings, limiter=TokenBucket(1000.0), sleep=sleep or SleepRecorder())


def _request(query: str | None = None, ids: list[str] | None = None) -> SourceRequest:
    return SourceRequest(source="fda_label", query=query, ids=ids or [])  # type: ignore[arg-type]


async def test_search_pages_with_skip_and_limit(fake: FakeOpenFda) -> None:
    client = _client(fake, page_size=1)
    labels = await client.labels('openfda.product_type:"human prescription drug" OR contraindications:history', 10)
    assert {x["set_id"] for x in labels} == {x["set_id"] for x in load("labels.json")}
    assert [(r["limit"], r["skip"]) for r in fake.requests] == [(["1"], ["0"]), (["1"], ["1"]), (["1"], ["2"])]
    fake.requests.clear()
    assert len(await client.labels("openfda.route:oral", 1)) == 1 and len(fake.requests) == 1


async def test_no_match_is_no_labels_not_a_failure(fake: FakeOpenFda) -> None:
    page = await _client(fake).search('openfda.generic_name:"unobtainium"', limit=5)
    assert (page.total, page.labels) == (0, [])


async def test_openfda_refusals_fail_with_its_message(fake: FakeOpenFda) -> None:
    client = _client(fake)
    with pytest.raises(OpenFdaRefused, match="1000"):
        await client.search("openfda.route:oral", limit=1001)  # refused before asking
    with pytest.raises(OpenFdaRefused, match="Skip value must 25000 or less"):
        await client._get({"search": "x:y", "limit": "1", "skip": "25001"})


async def test_rate_limit_is_retried_after_the_time_it_names(fake: FakeOpenFda) -> None:
    sleep = SleepRecorder()
    fake.rate_limited, fake.retry_after_s = 2, 3
    page = await _client(fake, sleep).search(f'set_id:"{WARFARIN_SET}"', limit=1)
    assert [x["set_id"] for x in page.labels] == [WARFARIN_SET]
    assert len(sleep.delays) == 2 and min(sleep.delays) >= 3


async def test_an_outage_outlasting_the_retries_is_transient(fake: FakeOpenFda) -> None:
    fake.fail_status = 503
    with pytest.raises(OpenFdaUnavailable, match="gave up after 3 attempts"):
        await _client(fake).search("openfda.route:oral", limit=1)
    fake.fail_status = None
    fake.rate_limited, fake.retry_after_s = 1, 3600
    with pytest.raises(OpenFdaUnavailable, match="Retry-After"):
        await _client(fake).search("openfda.route:oral", limit=1)


def test_a_plain_query_is_a_drug_name_and_an_expression_is_kept() -> None:
    assert search_expression("Warfarin") == (
        'openfda.generic_name:"Warfarin" OR openfda.brand_name:"Warfarin" OR openfda.substance_name:"Warfarin"'
    )
    assert search_expression('drug_interactions:"fluconazole"') == 'drug_interactions:"fluconazole"'
    assert "\\" not in search_expression('war"farin\\') and '"war farin"' in search_expression('war"farin\\')
    with pytest.raises(OpenFdaRefused):
        search_expression(' " ')


async def test_discovery_by_name_expression_and_set_id(fake: FakeOpenFda) -> None:
    source = FdaLabelSource(_client(fake), OpenFdaSettings(url=fake.url))
    by_brand = await source.discover(_request("diflucan"), max_results=10, refresh=False)
    assert [x["set_id"] for x in by_brand] == [FLUCONAZOLE_SET]
    by_field = await source.discover(_request('drug_interactions:"amiodarone"'), max_results=10, refresh=False)
    assert [x["set_id"] for x in by_field] == [WARFARIN_SET]
    both = await source.discover(
        _request("warfarin", ids=[FLUCONAZOLE_SET.upper(), WARFARIN_SET]), max_results=10, refresh=False
    )
    assert sorted(x["set_id"] for x in both) == sorted([FLUCONAZOLE_SET, WARFARIN_SET])  # one per set


async def test_fetch_makes_one_document_event_per_label_and_skips_bad_ones(fake: FakeOpenFda) -> None:
    source = FdaLabelSource(_client(fake), OpenFdaSettings(url=fake.url))
    labels = [*load("labels.json"), {"set_id": "not-a-uuid", "drug_interactions": ["x"]}, {"set_id": WARFARIN_SET}]
    events = [e async for e in source.fetch(labels, job_id="job-1", trace_id="t1")]
    assert [e.source_id for e in events] == [x["set_id"] for x in load("labels.json")]
    for event in events:
        assert event.format == "document-json" and event.document is not None and event.job_id == "job-1"
        assert event.document_id == f"fda_label:{event.source_id}" == event.document.document_id
        assert source.identify(event) == [event.document_id]


@pytest.mark.parametrize(
    ("body", "total", "count"),
    [
        ({"meta": {"results": {"total": 7}}, "results": [{"set_id": WARFARIN_SET}, "junk", 3, None]}, 7, 1),
        ({"meta": "not an object", "results": {"not": "a list"}}, 0, 0),
        ({"results": [{"set_id": WARFARIN_SET}]}, 1, 1),  # no meta: the page is all there is
        ({"meta": {"results": {"total": -4}}, "results": []}, 0, 0),
        (["a", "list"], 0, 0),
    ],
)
async def test_odd_response_bodies_are_read_for_what_they_hold(body: Any, total: int, count: int) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    async with httpx.AsyncClient(transport=transport) as http:
        client = OpenFdaClient(OpenFdaSettings(url="http://openfda.test"), http=http, limiter=TokenBucket(1000.0))
        page = await client.search("openfda.route:oral", limit=5)
    assert (page.total, len(page.labels)) == (total, count)


async def test_a_body_that_is_not_json_is_an_outage_not_a_result() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>maintenance</html>"))
    async with httpx.AsyncClient(transport=transport) as http:
        client = OpenFdaClient(OpenFdaSettings(url="http://openfda.test"), http=http, limiter=TokenBucket(1000.0))
        with pytest.raises(OpenFdaUnavailable, match="not JSON"):
            await client.search("openfda.route:oral", limit=5)
