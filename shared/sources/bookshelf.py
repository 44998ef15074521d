"""NCBI Bookshelf's identity: a record is a book part (``NBK<digits>``, its ``source_id``), cited ``[NBK:NBK...]``
and linked to its Bookshelf page. Which parts of a Bookshelf file are documents is
:mod:`shared.sources.bookshelf_parts` (it needs lxml, which not every service carries)."""

from __future__ import annotations

from shared.sources.base import SourceRule

BOOKSHELF = SourceRule(
    name="bookshelf",
    citation_kind="NBK",
    record_url="https://www.ncbi.nlm.nih.gov/books/{id}/",
    id_prefix="NBK",
    url_patterns=(r"ncbi\.nlm\.nih\.gov/books/",),
    cites_source_id=True,
    guidelines=True,
)
