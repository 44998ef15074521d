"""EutilsClient against the fake E-utilities server replaying real NCBI recordings."""

from __future__ import annotations

import random
import re

import pytest
from lxml import etree
from prometheus_client import REGISTRY

from services.fetcher.eutils import (
    EutilsClient,
    EutilsError,
    EutilsQueryError,
    is_open_access,
)
from services.fetcher.ratelimit import TokenBucket
from shared.settings import NcbiSettings
from tests.fakes.eutils_server import DEFAULT_RECORDS_DIR as FIXTURES
from tests.fakes.eutils_server import FakeEutils, SleepRecorder, fake_ncbi_settings


def make_settings(fake: FakeEutils, **overrides: object) -> NcbiSettings:
    return fake_ncbi_settings(fake, **{"esearch_page_size": 30, "efetch_batch": 3, **overrides})


def _recorded_ids(name: str) -> list[str]:
    return re.findall(r"<Id>(\d+)</Id>", (FIXTURES / name).read_text())


# ------------------------------------------------------------------------------------------ esearch


async def test_esearch_pages_over_the_webenv_up_to_the_cap(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    result = await client.esearch("cancer", max_results=75)
    assert result.count == 100
    assert result.pmids == _recorded_ids("esearch2.xml")[:75]
    assert result.webenv and result.query_key == "1"
    calls = fake_eutils.requests_to("esearch")
    assert [(c.param("retstart"), c.param("retmax")) for c in calls] == [
        ("0", "30"),
        ("30", "30"),
        ("60", "15"),
    ]
    assert calls[0].param("usehistory") == "y" and calls[0].param("WebEnv") is None
    assert all(c.param("WebEnv") == result.webenv and c.param("query_key") == "1" for c in calls[1:])
    assert all(c.method == "POST" for c in calls)


async def test_esearch_stops_at_the_count(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    result = await client.esearch("biopython", max_results=500)
    assert result.pmids == _recorded_ids("esearch1.xml")
    assert len(fake_eutils.requests_to("esearch")) == 1
    assert result.query_translation == '"biopython"[All Fields]'


async def test_esearch_default_cap_comes_from_settings(fake_eutils: FakeEutils, sleeps: SleepRecorder) -> None:
    settings = make_settings(fake_eutils, search_max_results=40)
    async with EutilsClient(settings, limiter=TokenBucket(10_000), sleep=sleeps) as c:
        result = await c.esearch("cancer")
    assert len(result.pmids) == 40


async def test_identity_on_every_call(fake_eutils: FakeEutils, sleeps: SleepRecorder) -> None:
    settings = make_settings(fake_eutils, ncbi_api_key="secret-key")
    async with EutilsClient(settings, limiter=TokenBucket(10_000), sleep=sleeps) as c:
        await c.esearch("cancer", max_results=45)
        await c.efetch(["9997"])
        await c.pmids_to_pmcids(["17299597"])
    assert len(fake_eutils.requests) == 4
    for request in fake_eutils.requests:
        assert request.param("tool") == "evidentia-tests"
        assert request.param("email") == "tests@example.org"
        assert request.param("api_key") == "secret-key"


async def test_error_list_is_an_error_not_an_empty_success(client: EutilsClient) -> None:
    with pytest.raises(EutilsQueryError) as info:
        await client.esearch("abcXYZ", db="protein")
    assert "PhraseNotFound" in str(info.value) and "abcXYZ" in str(info.value)
    assert info.value.errors == {"PhraseNotFound": ["abcXYZ"]}
    assert info.value.warnings == {"OutputMessage": ["No items found."]}
    assert isinstance(info.value, ValueError)


async def test_partly_unknown_query_is_refused_unless_not_strict(client: EutilsClient) -> None:
    term = "obstetrics[MeSH Terms] AND fleegle[MeSH Terms]"
    with pytest.raises(EutilsQueryError, match="fleegle"):
        await client.esearch(term)
    lenient = await client.esearch(term, strict=False)
    assert lenient.errors == {"PhraseNotFound": ["fleegle[MeSH Terms]"]}


async def test_error_element_is_a_query_error(client: EutilsClient) -> None:
    with pytest.raises(EutilsQueryError, match="Invalid db name specified: fleegle"):
        await client.esearch("cancer", db="fleegle")


async def test_no_hits_without_errors_is_an_empty_result(client: EutilsClient) -> None:
    result = await client.esearch("nothing matches this")
    assert result.count == 0 and result.pmids == []
    assert result.warnings == {"OutputMessage": ["No items found."]}


async def test_count(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    assert await client.count("biopython") == 20
    assert fake_eutils.requests[-1].param("rettype") == "count"


# ------------------------------------------------------------------------------------------ efetch


async def test_efetch_posts_in_batches(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    ids = ["12091962", "9997", "11748933", "11700088", "27797938", "17284678", "20301295"]
    batches = [(batch, body) async for batch, body in client.efetch_batches(ids)]
    assert [b for b, _ in batches] == [ids[0:3], ids[3:6], ids[6:7]]
    calls = fake_eutils.requests_to("efetch")
    assert [c.method for c in calls] == ["POST"] * 3
    assert [c.param("id") for c in calls] == [",".join(ids[0:3]), ",".join(ids[3:6]), ids[6]]
    assert all(c.param("db") == "pubmed" and c.param("retmode") == "xml" for c in calls)
    assert b'<PMID Version="1">20301295</PMID>' in batches[2][1]


async def test_efetch_error_answer_raises(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    fake_eutils.fail_next(
        200, body=b"<eFetchResult><ERROR>Cannot retrieve query</ERROR></eFetchResult>", utility="efetch"
    )
    with pytest.raises(EutilsError, match="Cannot retrieve query"):
        await client.efetch(["9997"])


# ------------------------------------------------------------------------------------------ retries


async def test_429_backs_off_at_least_retry_after(
    client: EutilsClient, fake_eutils: FakeEutils, sleeps: SleepRecorder
) -> None:
    labels = {"utility": "esearch", "status": "429"}
    before = REGISTRY.get_sample_value("evidentia_ncbi_requests_total", labels)
    fake_eutils.fail_next(429, count=2, retry_after=3)
    result = await client.esearch("biopython")
    assert len(result.pmids) == 20
    assert [r.status for r in fake_eutils.requests] == [429, 429, 200]
    assert len(sleeps.delays) == 2 and all(d >= 3 for d in sleeps.delays)
    after = REGISTRY.get_sample_value("evidentia_ncbi_requests_total", labels)
    assert (after or 0) - (before or 0) == 2


async def test_500_is_retried_with_growing_jittered_backoff(fake_eutils: FakeEutils, sleeps: SleepRecorder) -> None:
    settings = make_settings(fake_eutils, ncbi_backoff_base_s=1.0, ncbi_backoff_max_s=100.0)
    async with EutilsClient(settings, limiter=TokenBucket(10_000), sleep=sleeps, rng=random.Random(1)) as c:
        fake_eutils.fail_next(500, count=3)
        assert len((await c.esearch("biopython")).pmids) == 20
    assert [r.status for r in fake_eutils.requests] == [500, 500, 500, 200]
    first, second, third = sleeps.delays
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0


async def test_retries_run_out(fake_eutils: FakeEutils, sleeps: SleepRecorder) -> None:
    settings = make_settings(fake_eutils, ncbi_max_retries=2)
    async with EutilsClient(settings, limiter=TokenBucket(10_000), sleep=sleeps) as c:
        fake_eutils.fail_next(503, count=10)
        with pytest.raises(EutilsError, match="gave up after 3 attempts: HTTP 503"):
            await c.esearch("biopython")
    assert len(fake_eutils.requests) == 3


async def test_retry_after_beyond_the_limit_fails_at_once(
    client: EutilsClient, fake_eutils: FakeEutils, sleeps: SleepRecorder
) -> None:
    fake_eutils.fail_next(429, retry_after=3600)
    with pytest.raises(EutilsError, match="Retry-After 3600s"):
        await client.esearch("biopython")
    assert sleeps.delays == [] and len(fake_eutils.requests) == 1


async def test_client_errors_are_not_retried(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    fake_eutils.fail_next(400, body=b"bad request")
    with pytest.raises(EutilsError) as info:
        await client.esearch("biopython")
    assert info.value.status == 400 and len(fake_eutils.requests) == 1


async def test_rate_limit_body_with_200_is_a_429(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    fake_eutils.fail_next(200, body=b'{"error":"API rate limit exceeded","count":"11"}')
    assert len((await client.esearch("biopython")).pmids) == 20
    assert len(fake_eutils.requests) == 2


async def test_a_slow_answer_times_out_and_is_retried(fake_eutils: FakeEutils) -> None:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        fake_eutils.delay_s = 0.0  # the server recovers

    settings = make_settings(fake_eutils, ncbi_timeout_s=0.3)
    fake_eutils.delay_s = 1.0
    async with EutilsClient(settings, limiter=TokenBucket(10_000), sleep=sleep) as c:
        result = await c.esearch("biopython")
    assert len(result.pmids) == 20 and len(delays) == 1


async def test_every_call_takes_a_token(fake_eutils: FakeEutils, sleeps: SleepRecorder) -> None:
    waits: list[float] = []

    async def limiter_sleep(delay: float) -> None:
        waits.append(delay)

    bucket = TokenBucket(3, clock=lambda: 0.0, sleep=limiter_sleep)  # time stands still
    async with EutilsClient(make_settings(fake_eutils), limiter=bucket, sleep=sleeps) as c:
        await c.esearch("cancer", max_results=90)  # 3 pages
        await c.efetch(["9997"])
    assert waits == pytest.approx([1 / 3, 2 / 3, 1.0])


# ------------------------------------------------------------------------------------------ PMC


async def test_pmids_map_to_pmcids_by_elink(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    mapping = await client.pmids_to_pmcids(["17299597", "18405359", "34527728", "9997"])
    assert mapping == {"17299597": "PMC1790863", "18405359": "PMC2329613", "34527728": "PMC8435807"}
    calls = fake_eutils.requests_to("elink")
    assert [c.params["id"] for c in calls] == [["17299597", "18405359", "34527728"], ["9997"]]  # one id= each
    assert all(c.param("linkname") == "pubmed_pmc" and c.method == "POST" for c in calls)
    assert await client.pmcids_to_pmids(["PMC1790863", "2329613"]) == {
        "PMC1790863": "17299597",
        "PMC2329613": "18405359",
    }


async def test_pmc_articles_carry_the_open_access_verdict(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    closed = (FIXTURES / "pone.0000217.nxml").read_bytes().replace(b"<?properties open_access?>", b"")
    closed = closed.replace(b">1790863<", b">9990001<").replace(b">17299597<", b">99990001<")
    fake_eutils.add_pmc_records(closed)
    articles = [a async for a in client.fetch_pmc_articles(["PMC1790863", "PMC9990001", "8435807"])]
    verdicts = {a.pmcid: (a.open_access, a.pmid) for a in articles}
    assert verdicts == {
        "PMC1790863": (True, "17299597"),
        "PMC9990001": (False, "99990001"),
        "PMC8435807": (True, "34527728"),
    }
    assert b"<?properties open_access?>" in articles[0].xml


def test_open_access_from_the_licence_or_the_mark() -> None:
    def verdict(xml: str) -> tuple[bool, str | None]:
        parser = etree.XMLParser(remove_pis=False, remove_comments=False)
        return is_open_access(etree.fromstring(xml, parser))

    xlink = 'xmlns:xlink="http://www.w3.org/1999/xlink"'
    cc_by = "http://creativecommons.org/licenses/by/4.0/"
    licensed = (
        f'<article {xlink}><front><permissions><license license-type="open-access" xlink:href="{cc_by}"/>'
        "</permissions></front></article>"
    )
    assert verdict(licensed) == (True, cc_by)
    assert verdict("<article><front><permissions><license><license-p>All rights reserved.</license-p>"
                   "</license></permissions></front></article>")[0] is False  # fmt: skip
    assert verdict("<article><?properties open_access?><front/></article>")[0] is True
    assert verdict("<article><?properties open_access?><!--The publisher of this article does not allow "
                   "downloading of the full text in XML form.--><front/></article>")[0] is False  # fmt: skip
