"""The fetching half of a source: discover, fetch, identify.

A source's identity (name, link, citation id) is its :class:`shared.sources.SourceRule`, which every service
reads; this half is the fetcher's alone, since the fetcher is the one service that talks to sources.

- ``discover`` turns one :class:`shared.events.SourceRequest` (a query, ids, the source's options) into the
  units the source fetches (PMIDs for PubMed and PMC, packages for Bookshelf), in order;
- ``fetch`` turns units into ``DocumentFetched`` / ``DocumentDeleted`` events for ``documents.fetched``;
- ``identify`` names the documents the parser will store of one fetched event (a Bookshelf file may hold
  several book parts), so an ingestion job counts what will be stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, TypeVar

from shared.events import DocumentDeleted, DocumentFetched, SourceRequest
from shared.sources import SourceRule

Fetched = DocumentFetched | DocumentDeleted
Unit = TypeVar("Unit")


class FetchSource(Protocol[Unit]):
    """One source as the fetcher drives it; ``Unit`` is what its discovery finds and its fetch takes."""

    @property
    def rule(self) -> SourceRule:
        """The source's identity (its name is the ``source`` of its requests and documents)."""
        ...

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[Unit]:
        """The units ``request`` names, in order (a query capped at ``max_results``; ``refresh``: searched
        again even when recorded)."""
        ...

    def fetch(
        self, units: Sequence[Unit], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[Fetched]:
        """The document events of ``units``, attached to ``job_id`` and ``trace_id``."""
        ...

    def identify(self, event: DocumentFetched) -> list[str]:
        """The ids of the documents the parser stores of ``event``."""
        ...
