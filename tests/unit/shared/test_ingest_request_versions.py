"""The ingest request is source-neutral (version 2); version-1 events recorded from the old models are still
read, as the version-2 request they meant."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.events import IngestRequested, SourceRequest, ncbi_sources

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "events" / "IngestRequested.v1.jsonl"


def _recorded() -> list[IngestRequested]:
    return [IngestRequested.model_validate_json(line) for line in RECORDED.read_text().splitlines() if line.strip()]


def test_a_recorded_version_1_request_is_read_as_version_2() -> None:
    full, bare = _recorded()
    assert full.schema_version == 2 and full.job_id == "3f2a9c1e8b7d4e6fa0c5d2b1e4f70a19"
    assert full.trace_id == "5b8aa5a2d2c872e8321cf37308d69df2"
    assert (full.max_results, full.refresh) == (50, True)
    # The query ran at PMC, the PMIDs are PubMed's, the publisher is Bookshelf's; full text asked of both NCBI parts.
    assert full.sources == [
        SourceRequest(source="pmc", query="metformin AND polycystic ovary syndrome", options={"full_text": True}),
        SourceRequest(source="pubmed", ids=["12345678", "23456789"], options={"full_text": True}),
        SourceRequest(source="bookshelf", options={"publisher": "World Health Organization"}),
    ]
    assert bare.sources == [SourceRequest(source="pubmed", query="asthma")]
    assert (bare.max_results, bare.refresh) == (500, False)


def test_the_upgraded_request_travels_as_version_2() -> None:
    full, _ = _recorded()
    wire = full.model_dump(mode="json")
    assert wire["schema_version"] == 2 and "pmids" not in wire and "bookshelf_publisher" not in wire
    assert IngestRequested.model_validate_json(full.model_dump_json()) == full


def test_a_pubmed_query_with_pmids_is_one_pubmed_request() -> None:
    got = ncbi_sources(query="q", pmids=["1"], full_text=False)
    assert got == [SourceRequest(source="pubmed", query="q", ids=["1"])]


def test_a_request_needs_something_to_discover() -> None:
    with pytest.raises(ValidationError):
        IngestRequested(job_id="j")  # type: ignore[call-arg]  # version 1 without a query, PMIDs or publisher
    with pytest.raises(ValidationError):
        IngestRequested(job_id="j", sources=[])
    with pytest.raises(ValidationError):
        SourceRequest(source="pubmed")
    with pytest.raises(ValidationError):
        IngestRequested.model_validate({"schema_version": 1, "job_id": "j", "database": "nope", "pmids": ["1"]})
