"""Bodies of ``/v1/ingest``: start an ingestion job, and its acceptance."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.models import PRIORITY_EXCLUDED, PRIORITY_HIGH, ParsedDocument, Source
from shared.sources import source_rule


class IngestRequest(BaseModel):
    """Start an ingestion job: a query or record ids at a source (PubMed unless ``source`` says otherwise), a list
    of PMIDs, a Bookshelf publisher, or documents given inline (JSON import)."""

    model_config = ConfigDict(extra="forbid")

    source: Source = Field(
        "pubmed",
        description=(
            "Where `query` and `ids` go: `pubmed` (esearch), `pmc`, or a source with a search of its own "
            "(`clinicaltrials`: ClinicalTrials.gov's search terms). Bookshelf is ingested by `bookshelf_publisher`."
        ),
    )
    query: str | None = Field(
        None, min_length=1, max_length=4000, description="A query in the source's search syntax (PubMed: esearch)."
    )
    ids: list[str] = Field(
        default_factory=list, max_length=10_000, description="Record ids at `source`, e.g. NCT numbers."
    )
    condition: str | None = Field(
        None, min_length=1, max_length=1000, description="ClinicalTrials.gov: studies of this condition (query.cond)."
    )
    intervention: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="ClinicalTrials.gov: studies of this intervention (query.intr).",
    )
    pmids: list[str] = Field(default_factory=list, max_length=10_000, description="PubMed ids.")
    documents: list[ParsedDocument] = Field(
        default_factory=list, max_length=1000, description="Documents in the JSON-lines import format."
    )
    max_results: int = Field(500, ge=1, le=100_000, description="Most PMIDs taken from the query.")
    refresh: bool = Field(False, description="Fetch again documents already stored.")
    full_text: bool = Field(False, description="Also fetch the open-access PMC full text (JATS) of the PMIDs found.")
    priority: int | None = Field(
        None,
        ge=PRIORITY_EXCLUDED,
        le=PRIORITY_HIGH,
        description=(
            "Search priority of the documents the job creates (seed 003: 0 never returned, 10 low, 50 normal, "
            "100 high); with the `admin` scope also of those already stored that the job finds (a query job: every "
            "document its query finds), as `PATCH /v1/documents/{id}` does. An inline document's own `priority` "
            "wins. Unset: new documents get 50, stored ones keep theirs."
        ),
    )
    bookshelf_publisher: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="Ingest the NCBI Bookshelf Open Access books of this publisher, e.g. 'World Health Organization'.",
    )

    @model_validator(mode="after")
    def _something(self) -> IngestRequest:
        searched = self.query or self.condition or self.intervention
        if not (searched or self.ids or self.pmids or self.documents or self.bookshelf_publisher):
            raise ValueError("give a query, ids, pmids, bookshelf_publisher or documents")
        if (self.condition or self.intervention) and self.source != "clinicaltrials":
            raise ValueError("condition and intervention are ClinicalTrials.gov searches: give source clinicaltrials")
        if self.source == "bookshelf" and (self.query or self.ids):
            raise ValueError("Bookshelf is ingested by bookshelf_publisher, not by a query or ids")
        rule = source_rule(self.source)
        wrong = [i for i in self.ids if not rule.valid(i)]
        if wrong:
            raise ValueError(f"not {self.source} ids (e.g. {rule.example_id}): {wrong[:5]}")
        if "\\u0000" in self.model_dump_json():
            raise ValueError("text may not contain NUL (\\u0000) characters")
        bad = [p for p in self.pmids if not p.strip().isdigit()]
        if bad:
            raise ValueError(f"PMIDs are digits only; not: {bad[:5]}")
        return self


class IngestAccepted(BaseModel):
    job_id: str
    status_url: str
