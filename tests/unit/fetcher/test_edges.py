"""The fetcher's edges, without Kafka: NCBI outages are transient, publishers match
exactly and are capped, large documents travel by reference (claim check)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from services.fetcher.bookshelf import (
    BookshelfPackage,
    BookshelfUnavailable,
    PublisherRefused,
    filter_publisher,
    publisher_packages,
)
from services.fetcher.eutils import EutilsClient, EutilsError, EutilsUnavailable
from services.fetcher.ratelimit import TokenBucket
from services.fetcher.state import FetcherState
from shared.claimcheck import ClaimMissing, check_in, claim, content_ref, oversized_reason
from shared.events import DocumentFetched
from shared.kafka.errors import is_transient
from shared.settings import Settings
from tests.fakes.eutils_server import FakeEutils, SleepRecorder, fake_ncbi_settings


async def test_ncbi_5xx_and_timeouts_that_outlast_the_retries_are_transient(
    fake_eutils: FakeEutils, sleeps: SleepRecorder
) -> None:
    settings = fake_ncbi_settings(fake_eutils, ncbi_max_retries=1)
    async with EutilsClient(settings, limiter=TokenBucket(10_000), sleep=sleeps) as c:
        fake_eutils.fail_next(503, count=2)
        with pytest.raises(EutilsUnavailable) as info:
            await c.esearch("biopython")
        assert is_transient(info.value), "an NCBI outage must be retried, never dead-lettered"
        fake_eutils.fail_next(507, count=2)  # any 5xx, not only the usual four
        with pytest.raises(EutilsUnavailable):
            await c.esearch("biopython")
        fake_eutils.fail_next(429, retry_after=3600)  # rate limited for an hour: retried later
        with pytest.raises(EutilsUnavailable):
            await c.esearch("biopython")
        fake_eutils.fail_next(400, body=b"bad request")  # the request's own fault stays permanent
        with pytest.raises(EutilsError) as bad:
            await c.esearch("biopython")
        assert not is_transient(bad.value)
    assert is_transient(BookshelfUnavailable("package down"))


def _pkg(publisher: str, n: int) -> BookshelfPackage:
    return BookshelfPackage(f"a/b/p_NBK{n}.tar.gz", f"Book {n}", publisher, "2024", f"NBK{n}", "")


def test_publisher_match_is_exact_and_capped() -> None:
    packages = [_pkg("World Health Organization", 1), _pkg("University of Washington", 2), _pkg("WHO Press", 3)]
    packages += [_pkg("world  health organization ", 4)]
    # A publisher matches by its exact name, case and spacing aside: never as a substring of another.
    assert filter_publisher(packages, "a") == []
    assert [p.accession for p in filter_publisher(packages, "World Health Organization")] == ["NBK1", "NBK4"]
    with pytest.raises(PublisherRefused, match="similar name: World Health Organization"):
        publisher_packages(packages, "Health", cap=10)
    with pytest.raises(PublisherRefused, match="2 Bookshelf packages, over the cap of 1"):
        publisher_packages(packages, "world health organization", cap=1)
    assert len(publisher_packages(packages, "WHO press", cap=1)) == 1


def test_a_package_timeout_over_the_poll_interval_is_refused() -> None:
    settings = Settings()
    settings.kafka.max_poll_interval_ms = 60_000
    settings.ncbi.bookshelf_package_timeout_s = 120
    with pytest.raises(ValueError, match="MAX_POLL_INTERVAL_MS"):
        FetcherState(settings)
    settings.ncbi.bookshelf_package_timeout_s = 50
    FetcherState(settings)


class FakePool:
    """The two statements of the claim check, on a dict."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, str]] = {}

    async def execute(self, sql: str, *args: Any) -> str:
        if sql.lstrip().startswith("INSERT INTO raw_documents"):
            ref, doc, _size, content = args
            self.rows.setdefault(ref, (doc, content))
            return "INSERT 0 1"
        return "DELETE 0"

    async def fetchval(self, sql: str, ref: str) -> str | None:
        row = self.rows.get(ref)
        return row[1] if row else None


def _doc(content: str) -> DocumentFetched:
    return DocumentFetched(
        document_id="bookshelf:NBK1.ch1",
        source="bookshelf",
        source_id="NBK1.ch1",
        format="bookshelf-nxml",
        content=content,
    )


async def test_a_large_document_travels_by_reference_and_comes_back_whole() -> None:
    pool = FakePool()
    small = _doc("<book-part>short</book-part>")
    assert await check_in(pool, small, 1024) is small and pool.rows == {}
    text = "<book-part>" + "é guideline text " * 200_000 + "</book-part>"  # ~3.6 MB
    event = await check_in(pool, _doc(text), 256 * 1024)
    wire = event.model_dump_json().encode()
    assert len(wire) < 2048, "the event must carry a reference, not the text"
    assert event.schema_version == 2 and event.content is None
    assert event.content_ref == "sha256:" + hashlib.sha256(text.encode()).hexdigest() == content_ref(text)
    assert event.content_bytes == len(text.encode())
    back = DocumentFetched.model_validate_json(wire)
    assert await claim(pool, back) == text
    pool.rows.clear()
    with pytest.raises(ClaimMissing):
        await claim(pool, back)


def test_claim_check_events_are_version_2_and_carry_the_content_once() -> None:
    ref = "sha256:" + "0" * 64
    with pytest.raises(ValueError, match="schema_version 2"):
        DocumentFetched(document_id="d", source="pmc", source_id="P", format="jats-xml", content_ref=ref)
    with pytest.raises(ValueError, match="once"):
        DocumentFetched(
            schema_version=2,
            document_id="d",
            source="pmc",
            source_id="P",
            format="jats-xml",
            content="x",
            content_ref=ref,
        )


def test_an_event_still_too_large_gets_a_reason() -> None:
    assert oversized_reason(1_000, 8_388_608) is None
    reason = oversized_reason(9_000_000, 8_388_608)
    assert reason is not None and "9000000 bytes" in reason and "max_request_size" in reason


class RecordingPool:
    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    async def execute(self, sql: str, *args: Any) -> str:
        self.statements.append((" ".join(sql.split()), args))
        return "UPDATE 1"

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        return [{"task_id": "bookshelf:NBK5", "state": "failed", "error": "x"}]


async def test_a_dead_lettered_package_fails_its_task_and_a_dead_lettered_request_its_job() -> None:
    from services.fetcher.jobs import fail_jobs_hook, package_key

    pool = RecordingPool()
    await fail_jobs_hook(pool)(["pubmed:1", package_key("job1", "NBK5"), "job2"], RuntimeError("boom"))  # type: ignore[arg-type]
    sql = [s for s, _ in pool.statements]
    assert not any("pubmed:1" in str(a) for _, a in pool.statements), "document ids are not jobs"
    task = next(a for s, a in pool.statements if s.startswith("UPDATE ingest_job_tasks"))
    assert task[:3] == ("job1", "bookshelf:NBK5", "failed") and "boom" in task[3]
    assert any(s.startswith("UPDATE ingest_jobs SET state = 'discovered'") for s in sql), "the job completes"
    job = next(a for s, a in pool.statements if s.startswith("UPDATE ingest_jobs SET state = 'failed'"))
    assert job[0] == "job2" and "RuntimeError: boom" in job[1]
