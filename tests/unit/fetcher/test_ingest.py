"""The fetching core (no Kafka, no database): efetch batches -> one event per record."""

from __future__ import annotations

from services.fetcher.eutils import EutilsClient
from services.fetcher.sources.pmc import fetch_pmc
from services.fetcher.sources.pubmed import fetch_pubmed
from shared.events import DocumentDeleted, DocumentFetched
from tests.fakes.eutils_server import DEFAULT_RECORDS_DIR as FIXTURES
from tests.fakes.eutils_server import FakeEutils


async def test_fetch_pubmed_one_event_per_record(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    deletion = b'<DeleteCitation><PMID Version="1">31000001</PMID></DeleteCitation>'
    fake_eutils.add_pubmed_records(b"<PubmedArticleSet>" + deletion + b"</PubmedArticleSet>")
    wanted = ["12091962", "9997", "12091962", " 11748933", "20301295", "31000001", "55555555", "not-a-pmid"]
    missing: list[list[str]] = []

    async def on_missing(pmids: list[str]) -> None:
        missing.append(pmids)

    events = [e async for e in fetch_pubmed(wanted, client, job_id="job-1", trace_id="t-1", on_missing=on_missing)]
    fetched = [e for e in events if isinstance(e, DocumentFetched)]
    deleted = [e for e in events if isinstance(e, DocumentDeleted)]
    assert [e.document_id for e in fetched] == [
        "pubmed:12091962",
        "pubmed:9997",
        "pubmed:11748933",
        "pubmed:20301295",
    ]
    assert [e.document_id for e in deleted] == ["pubmed:31000001"]
    assert missing == [["55555555"]]
    for event in fetched:
        assert event.format == "pubmed-xml" and event.source == "pubmed"
        assert event.content and f">{event.source_id}</PMID>" in event.content
        assert event.job_id == "job-1" and event.trace_id == "t-1"
    # de-duplicated and batched by 3: two POSTs
    posted = [r.param("id") for r in fake_eutils.requests_to("efetch")]
    assert posted == ["12091962,9997,11748933", "20301295,31000001,55555555"]


async def test_fetch_pmc_keeps_only_open_access_full_text(client: EutilsClient, fake_eutils: FakeEutils) -> None:
    closed = (FIXTURES / "pone.0000217.nxml").read_bytes().replace(b"<?properties open_access?>", b"")
    closed = closed.replace(b">1790863<", b">9990001<").replace(b">17299597<", b">99990001<")
    fake_eutils.add_pmc_records(closed)
    not_open: list[str] = []

    async def on_closed(pmcids: list[str]) -> None:
        not_open.extend(pmcids)

    events = [
        e
        async for e in fetch_pmc(["17299597", "99990001", "18405359", "9997"], client, job_id="j", on_closed=on_closed)
    ]
    assert [e.document_id for e in events] == ["pmc:PMC1790863", "pmc:PMC2329613"]
    assert all(e.format == "jats-xml" and e.source == "pmc" and e.job_id == "j" for e in events)
    assert not_open == ["PMC9990001"]
    assert [r.param("db") for r in fake_eutils.requests_to("efetch")] == ["pmc"]
