"""The fetcher's sources: one module each (discover, fetch, identify; see :mod:`.base`), and their registry.

:class:`FetcherSources` builds every source on the clients the fetcher holds and says how each one's units
travel from discovery to fetching, so the routers (:mod:`services.fetcher.routers`) consult it instead of
naming a source:

- ``by_pmid``: sources whose discovery finds PMIDs (PubMed, PMC); the PMIDs go on ``pmids.discovered`` and are
  fetched from PubMed in batches, with the PMC full text when asked;
- ``packages``: Bookshelf, whose units are packages, one ``bookshelf.packages`` event each, so that no handler
  call downloads a whole publisher;
- ``inline``: every other source; its units are fetched by the handler that discovered them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from services.fetcher.bookshelf import BookshelfClient
from services.fetcher.eutils import EutilsClient
from services.fetcher.sources.base import FetchSource
from services.fetcher.sources.bookshelf import BookshelfSource
from services.fetcher.sources.pmc import PmcSource
from services.fetcher.sources.pubmed import PubmedSource
from shared.db.jobs import Db
from shared.settings import NcbiSettings


def pmid_sources(eutils: EutilsClient, pool: Db, settings: NcbiSettings) -> dict[str, FetchSource[str]]:
    """The sources whose discovery finds PMIDs (PubMed, PMC), by name."""
    found: list[FetchSource[str]] = [PubmedSource(eutils, pool, settings), PmcSource(eutils, pool, settings)]
    return {s.rule.name: s for s in found}


class FetcherSources:
    """Every source the fetcher drives, built on its clients, by how its units travel: the NCBI ones on their
    topics, and ``inline`` the sources (each on a client of its own) whose units are fetched where they are
    discovered."""

    def __init__(
        self,
        eutils: EutilsClient,
        bookshelf: BookshelfClient,
        pool: Db,
        settings: NcbiSettings,
        inline: Iterable[FetchSource[Any]] = (),
    ) -> None:
        self.pubmed = PubmedSource(eutils, pool, settings)
        self.pmc = PmcSource(eutils, pool, settings)
        self.by_pmid: dict[str, FetchSource[str]] = {s.rule.name: s for s in (self.pubmed, self.pmc)}
        self.packages = BookshelfSource(bookshelf, settings)
        self.inline: dict[str, FetchSource[Any]] = {s.rule.name: s for s in inline}

    def names(self) -> list[str]:
        """Every source the fetcher can ingest from."""
        return [*self.by_pmid, self.packages.rule.name, *self.inline]


__all__ = ["BookshelfSource", "FetchSource", "FetcherSources", "PmcSource", "PubmedSource", "pmid_sources"]
