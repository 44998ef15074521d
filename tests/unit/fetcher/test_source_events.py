"""PMC full text and Bookshelf options of an ingest request, and the ids a Bookshelf file is tracked by."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.fetcher.bookshelf import nxml_events
from services.fetcher.handlers import bookshelf_document_ids
from services.gateway.schemas import IngestRequest
from shared.events import DocumentFetched, IngestRequested, PmidDiscovered

GUIDELINE = Path(__file__).resolve().parents[2] / "fixtures" / "bookshelf" / "malaria-guideline.nxml"


def test_ingest_request_takes_a_bookshelf_publisher_alone() -> None:
    req = IngestRequested(job_id="j", bookshelf_publisher="World Health Organization")
    assert req.full_text is False and req.pmids == []
    with pytest.raises(ValidationError):
        IngestRequested(job_id="j")
    # Producers that do not know the new fields still make valid events.
    old = IngestRequested.model_validate({"schema_version": 1, "job_id": "j", "pmids": ["1"]})
    assert old.full_text is False and old.bookshelf_publisher is None
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
