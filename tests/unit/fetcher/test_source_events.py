"""PMC full text and Bookshelf options of an ingest request, and the ids a Bookshelf file is tracked by."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.fetcher.bookshelf import nxml_events
from services.fetcher.sources.bookshelf import bookshelf_document_ids
from services.gateway.schemas import IngestRequest
from shared.events import (
    PUBLISHER_OPTION,
    DocumentFetched,
    IngestRequested,
    PmidDiscovered,
    SourceRequest,
    ncbi_sources,
)

GUIDELINE = Path(__file__).resolve().parents[2] / "fixtures" / "bookshelf" / "malaria-guideline.nxml"


def test_ingest_request_takes_a_bookshelf_publisher_alone() -> None:
    req = IngestRequested(job_id="j", sources=ncbi_sources(bookshelf_publisher="World Health Organization"))
    assert req.sources == [SourceRequest(source="bookshelf", options={PUBLISHER_OPTION: "World Health Organization"})]
    with pytest.raises(ValidationError):
        IngestRequested(job_id="j")  # type: ignore[call-arg]
    # Producers that do not know the newer version-1 fields still make valid events.
    old = IngestRequested.model_validate({"schema_version": 1, "job_id": "j", "pmids": ["1"]})
    assert old.sources == [SourceRequest(source="pubmed", ids=["1"])]  # no full text, no publisher
    assert PmidDiscovered(pmid="1").full_text is False
    body = IngestRequest(bookshelf_publisher="World Health Organization")
    assert body.bookshelf_publisher == "World Health Organization"
    assert IngestRequest(pmids=["1"], full_text=True).full_text is True
    with pytest.raises(ValidationError):
        IngestRequest(full_text=True)


def test_a_whole_book_file_is_tracked_by_its_parts() -> None:
    events = list(nxml_events([("NBK998001", "NBK998001.nxml", GUIDELINE.read_bytes())], job_id="j"))
    assert len(events) == 1
    ids = bookshelf_document_ids(events[0])
    assert len(ids) == 4 and all(i.startswith("bookshelf:") for i in ids)


def test_an_unparsable_file_keeps_its_own_id() -> None:
    event = DocumentFetched(
        document_id="bookshelf:NBK1",
        source="bookshelf",
        source_id="NBK1",
        format="bookshelf-nxml",
        content="<not-a-book/>",
    )
    assert bookshelf_document_ids(event) == ["bookshelf:NBK1"]
