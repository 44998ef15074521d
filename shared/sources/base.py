"""What every service knows of a source: its name, how a record of it is linked and how an answer cites it.

A :class:`SourceRule` is the identity half of a source; the fetching half (discover, fetch, identify) lives in
the fetcher (``services/fetcher/sources/``), the only service that talks to sources. Every other service reads
a source through its rule, found in the registry (:mod:`shared.sources`), never by testing its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceRule:
    """One source's identity: ``name`` (the ``source`` of its documents and the prefix of their ids),
    ``citation_kind`` (an answer cites a record as ``[<kind>:<id>]``), ``record_url`` (the record's page,
    ``{id}`` standing for its id), ``id_prefix`` (the letters that make an id self-identifying in prose,
    e.g. ``PMC``; empty when the id is bare digits), ``url_patterns`` (regexes of the record links a reader
    takes for a citation, host and path up to the id) and ``cites_source_id`` (a document of this source is
    cited by its own ``source_id`` when it has no stronger identity; PubMed and PMC ids travel in the
    document's ``pmid``/``pmcid`` fields instead) and ``guidelines`` (its documents are clinical guidelines:
    what the guideline workflows search)."""

    name: str
    citation_kind: str
    record_url: str
    id_prefix: str = ""
    url_patterns: tuple[str, ...] = ()
    cites_source_id: bool = False
    guidelines: bool = False

    def url(self, record_id: str) -> str:
        """The page of record ``record_id`` at the source."""
        return self.record_url.format(id=record_id)

    def citation_id(self, record_id: str) -> str:
        """How an answer cites record ``record_id``: ``<kind>:<id>``."""
        return f"{self.citation_kind}:{record_id}"

    def canonical(self, value: str) -> str:
        """``value`` (digits, or the id with its prefix in any case) as the id this source writes, e.g.
        ``123`` or ``pmc123`` -> ``PMC123`` for PMC."""
        value = value.strip()
        if self.id_prefix and value.upper().startswith(self.id_prefix):
            value = value[len(self.id_prefix) :]
        return f"{self.id_prefix}{value}"

    def value_pattern(self) -> str:
        """A regex of this source's ids as written in text (the prefix optional, any case)."""
        return rf"(?:{re.escape(self.id_prefix.lower())})?\d+" if self.id_prefix else r"\d+"
