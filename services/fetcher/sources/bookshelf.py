"""NCBI Bookshelf as a source: discovery of a publisher's Open Access packages, fetching of their NXML parts.

Units are packages (rows of the Open Access ``file_list.csv``) of the publisher the request names (option
``publisher``, matched exactly, at most ``EVIDENTIA_BOOKSHELF_MAX_PACKAGES``). A package is downloaded and its
``.nxml`` files become ``bookshelf-nxml`` documents; one file may hold a whole book, which the parser stores as one
document per kept book part (:mod:`shared.sources.bookshelf_parts`), so that is what :meth:`identify` names.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

from lxml import etree

from services.fetcher.bookshelf import BookshelfClient, BookshelfPackage, nxml_events, publisher_packages
from shared.events import PUBLISHER_OPTION, DocumentFetched, SourceRequest
from shared.models import document_id
from shared.settings import NcbiSettings
from shared.sources import SourceRule, bookshelf_parts
from shared.sources.bookshelf import BOOKSHELF

log = logging.getLogger(__name__)


def bookshelf_document_ids(event: DocumentFetched) -> list[str]:
    """The ids of the documents the parser makes of a Bookshelf NXML file: one per (kept) book part.

    A package file may hold a whole book; the parser stores each ``book-part`` as its own document, so a
    job must count those, not the file. A file that does not parse keeps its own id (the parser will
    dead-letter it and mark that id failed).
    """
    try:
        return [document_id(BOOKSHELF.name, sid) for sid in bookshelf_parts.source_ids(event.content or "")]
    except (ValueError, etree.LxmlError) as exc:
        log.info("Bookshelf file not parsable here", extra={"document_id": event.document_id, "error": str(exc)})
        return [event.document_id]


class BookshelfSource:
    """Bookshelf on top of :class:`services.fetcher.bookshelf.BookshelfClient`."""

    def __init__(self, client: BookshelfClient, settings: NcbiSettings) -> None:
        self.client = client
        self.settings = settings

    @property
    def rule(self) -> SourceRule:
        return BOOKSHELF

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[BookshelfPackage]:
        """The packages of the publisher ``request`` names; :class:`PublisherRefused` for an unknown publisher or
        one with more packages than allowed, :class:`BookshelfUnavailable` when the list cannot be had now."""
        publisher = str(request.options.get(PUBLISHER_OPTION) or "")
        return publisher_packages(await self.client.file_list(), publisher, self.settings.bookshelf_max_packages)

    async def fetch(
        self, units: Sequence[BookshelfPackage], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[DocumentFetched]:
        """Each package downloaded in turn and its usable parts yielded as they are read."""
        for package in units:
            async for item in self.client.iter_nxml(package):
                for doc in nxml_events([item], job_id=job_id, trace_id=trace_id):
                    yield doc

    def identify(self, event: DocumentFetched) -> list[str]:
        return bookshelf_document_ids(event)
