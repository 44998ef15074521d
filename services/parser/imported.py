"""Documents given inline (``document-json``: ``POST /v1/ingest`` ``documents``, the JSON-lines import).

Such a document is a claim by whoever sent it, so the server derives what it derives for a fetched record
itself: the chunks are made here (any chunks sent are dropped), and ``study_type``, ``evidence_level`` and
``retracted`` come from the document's publication types (and MeSH, title, book subjects) by the same rules
the NCBI parsers use; the values sent are ignored. Whether the document may be stored at all (it never
replaces an NCBI record) is :mod:`shared.provenance`'s rule, applied when it is stored.
"""

from __future__ import annotations

from services.parser.evidence import classify_jats, classify_pubmed
from services.parser.nxml import classify_book
from services.parser.pubmed import RETRACTED_TYPES
from shared.models import EVIDENCE_WEIGHTS, ParsedDocument, StudyType


def derived_fields(doc: ParsedDocument) -> tuple[StudyType, float, bool]:
    """(study type, evidence weight, retracted) as the server derives them for ``doc``'s source."""
    retracted = any(p.strip().lower() in RETRACTED_TYPES for p in doc.publication_types)
    if doc.source == "pubmed":
        study_type, level = classify_pubmed(doc.publication_types, [m.descriptor for m in doc.mesh])
    elif doc.source == "pmc":
        study_type, level = classify_jats(None, doc.title, doc.keywords)
        if doc.publication_types:  # PubMed types, where the import has them, decide as for a PubMed record
            by_type, by_level = classify_pubmed(doc.publication_types, [m.descriptor for m in doc.mesh])
            if by_type != "other":
                study_type, level = by_type, by_level
        retracted = retracted or doc.title.strip().upper().startswith("RETRACTED")
    else:
        study_type = classify_book(doc.title, "", None, doc.keywords)
        level = EVIDENCE_WEIGHTS[study_type]
    return study_type, level, retracted


def server_side(doc: ParsedDocument) -> ParsedDocument:
    """``doc`` without its client-made chunks and with the derived study type, evidence weight and retraction."""
    study_type, level, retracted = derived_fields(doc)
    return doc.model_copy(
        update={"chunks": [], "study_type": study_type, "evidence_level": level, "retracted": retracted}
    )
