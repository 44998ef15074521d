"""Provenance of stored documents: an NCBI record is never replaced by a document given inline.

Every stored document has an ``origin`` (migration 130): ``ncbi`` when the parser made it from an NCBI record
(E-utilities, a PubMed baseline file, PMC JATS, Bookshelf NXML), ``inline`` when it came as a
:class:`~shared.models.ParsedDocument` (``POST /v1/ingest`` ``documents``, the JSON-lines import).

The rule, owned here and applied twice (the gateway answers 409 before anything is accepted; the parser
refuses at storage time, for the race where the NCBI record lands while the inline one is in flight):

- an inline document is refused when any id it claims (its own document id, ``pubmed:<pmid>``,
  ``pmc:<pmcid>``) is stored as an NCBI record;
- an inline document must be consistent with its source: a ``pubmed`` document's ``pmid`` is its
  ``source_id``, a ``pmc`` document's ``pmcid`` is its ``source_id`` (otherwise 422);
- a later NCBI fetch of the same id replaces an inline document (NCBI is the authority), and the fetcher
  does not count an inline copy as "already stored";
- an inline document stored *before* the NCBI record of an id it claims under another id of its own (a ``pmc``
  document giving the record's ``pmid``, a ``pubmed`` one giving its ``pmcid``) loses that claim when the
  record arrives (:func:`claim_column`): it stays stored, its ``pmid`` (or ``pmcid``) is cleared and recorded
  under ``withdrawn_claims`` in its stored metadata, and it is cited by what it has left (its PMCID, or its
  own ``source:source_id``). Both orders end the same way: one document is cited as the record's id.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from shared.models import ParsedDocument, document_id

Origin = Literal["ncbi", "inline"]
ORIGINS: tuple[Origin, ...] = ("ncbi", "inline")


class Db(Protocol):
    async def fetch(self, query: str, *args: Any) -> list[Any]: ...


def claimed_ids(doc: ParsedDocument) -> list[str]:
    """Every stored document id ``doc`` would be cited as or stands for (its own id first)."""
    ids = [doc.document_id]
    if doc.pmid:
        ids.append(document_id("pubmed", doc.pmid.strip()))
    if doc.pmcid:
        ids.append(document_id("pmc", doc.pmcid.strip()))
    return list(dict.fromkeys(ids))


def claim_column(record_id: str) -> tuple[Literal["pmid", "pmcid"], str] | None:
    """The column (and its value) by which an inline document of another id claims the record ``record_id``
    (the inverse of :func:`claimed_ids`), or None when no column does (a Bookshelf id)."""
    source, _, source_id = record_id.partition(":")
    if source == "pubmed":
        return "pmid", source_id
    if source == "pmc":
        return "pmcid", source_id
    return None


def inconsistency(doc: ParsedDocument) -> str | None:
    """Why an inline document's ids contradict each other, or None."""
    if doc.source == "pubmed" and doc.pmid is not None and doc.pmid.strip() != doc.source_id.strip():
        return f"a pubmed document's pmid ({doc.pmid}) must be its source_id ({doc.source_id})"
    if doc.source == "pmc" and doc.pmcid is not None and doc.pmcid.strip() != doc.source_id.strip():
        return f"a pmc document's pmcid ({doc.pmcid}) must be its source_id ({doc.source_id})"
    return None


CONFLICT_REASON = (
    "is stored as a record fetched from NCBI; an inline document never replaces it "
    "(ingest the id with `pmids` and `refresh: true` to fetch the NCBI record again)"
)


async def ncbi_records(db: Db, ids: list[str]) -> list[str]:
    """Those of ``ids`` stored as NCBI records (in the order given)."""
    if not ids:
        return []
    rows = await db.fetch(
        "SELECT document_id FROM documents WHERE document_id = ANY($1::text[]) AND origin = 'ncbi'", ids
    )
    found = {str(r["document_id"]) for r in rows}
    return [i for i in ids if i in found]
