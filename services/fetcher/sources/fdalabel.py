"""FDA drug labels as a source: discovery by an openFDA search (or by set ids), one document per label.

A request's ``query`` is either an openFDA search expression (it names a field: ``openfda.rxcui:855288``,
``drug_interactions:"fluconazole"``) or plain drug names, searched as generic, brand and substance names;
its ``ids`` are label set ids. openFDA serves the current version of each set, with the whole label, so
discovery returns the labels themselves and fetching turns each into a ``document-json`` event
(:func:`shared.sources.fdalabel_document.label_document`): the parser stores it under its set id, replacing
an older version. A label that cannot be a document (no set id, no section) is skipped and logged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from services.fetcher.openfda import OpenFdaClient, OpenFdaRefused
from shared.events import DocumentFetched, SourceRequest
from shared.ingestion import document_event
from shared.models import document_id
from shared.settings import OpenFdaSettings
from shared.sources import SourceRule
from shared.sources.fdalabel import FDA_LABEL
from shared.sources.fdalabel_document import LabelError, label_document, set_id_of

log = logging.getLogger(__name__)

#: Set ids asked for in one search (``set_id:"a" OR set_id:"b" ...``).
IDS_PER_SEARCH = 50
_FIELD = re.compile(r"\b[a-z_]+(?:\.[a-z_]+)*:")
_NAME_FIELDS = ("openfda.generic_name", "openfda.brand_name", "openfda.substance_name")


def search_expression(query: str) -> str:
    """The openFDA search of a request's ``query``: as written when it names a field, else its words as one
    drug name looked up among generic, brand and substance names."""
    query = query.strip()
    if _FIELD.search(query):
        return query
    name = re.sub(r'["\\]', " ", query).strip()
    if not name:
        raise OpenFdaRefused("empty drug label query")
    return " OR ".join(f'{field}:"{name}"' for field in _NAME_FIELDS)


class FdaLabelSource:
    """FDA drug labels on top of :class:`services.fetcher.openfda.OpenFdaClient`; units are labels."""

    def __init__(self, client: OpenFdaClient, settings: OpenFdaSettings) -> None:
        self.client = client
        self.settings = settings

    @property
    def rule(self) -> SourceRule:
        return FDA_LABEL

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[dict[str, Any]]:
        """The labels ``request`` names: its set ids, then its query's (capped at ``max_results`` and
        ``EVIDENTIA_OPENFDA_MAX_RESULTS``); one per set id."""
        cap = min(max_results, self.settings.max_results)
        found: list[dict[str, Any]] = []
        ids = [i.strip().lower() for i in request.ids if i.strip()]
        for start in range(0, len(ids), IDS_PER_SEARCH):
            batch = ids[start : start + IDS_PER_SEARCH]
            search = " OR ".join(f'set_id:"{re.sub(r"[^0-9a-f-]", "", i)}"' for i in batch)
            found.extend(await self.client.labels(search, len(batch)))
        if request.query and request.query.strip():
            found.extend(await self.client.labels(search_expression(request.query), cap))
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        for label in found:
            try:
                key = set_id_of(label)
            except LabelError:
                key = f"#{len(out)}"  # kept: fetch logs and skips it
            if key not in seen:
                seen.add(key)
                out.append(label)
        return out

    async def fetch(
        self, units: Sequence[dict[str, Any]], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[DocumentFetched]:
        """Each label as a ``document-json`` event; a label that cannot be a document is skipped."""
        for label in units:
            try:
                doc = label_document(label)
            except LabelError as exc:
                log.warning("drug label skipped", extra={"job_id": job_id, "error": str(exc)})
                continue
            yield document_event(doc, job_id=job_id, trace_id=trace_id)

    def identify(self, event: DocumentFetched) -> list[str]:
        return [document_id(FDA_LABEL.name, event.source_id)]
