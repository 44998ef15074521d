"""What every service knows of a source: its name, how a record of it is linked and how an answer cites it.

A :class:`SourceRule` is the identity half of a source; the fetching half (discover, fetch, identify) lives in
the fetcher (``services/fetcher/sources/``), the only service that talks to sources. Every other service reads
a source through its rule, found in the registry (:mod:`shared.sources`), never by testing its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The id body of a source whose record ids are numbers (PMIDs, PMC and Bookshelf ids after their prefix).
DIGITS = r"\d+"


@dataclass(frozen=True)
class SourceRule:
    """One source's identity: ``name`` (the ``source`` of its documents and the prefix of their ids),
    ``citation_kind`` (an answer cites a record as ``[<kind>:<id>]``), ``record_url`` (the record's page,
    ``{id}`` standing for its id), ``id_prefix`` (the letters that make an id self-identifying in prose,
    e.g. ``PMC``; empty when the id has none), ``id_pattern`` (a regex of an id after its prefix: digits for the
    NCBI sources, eight digits for ClinicalTrials.gov, a UUID for a label's set id), ``lowercase_ids`` (ids are
    written in lower case, e.g. UUIDs), ``example_id`` (one well-formed id, as written, for help texts and
    tests), ``url_patterns`` (regexes of the record links a reader takes for a citation, host and path up to
    the id, which follows a ``/`` or ``=``), ``cites_source_id`` (a document of this source is cited by its own
    ``source_id`` when it has no stronger identity; PubMed and PMC ids travel in the document's
    ``pmid``/``pmcid`` fields instead) and ``guidelines`` (its documents are clinical guidelines: what the
    guideline workflows search).

    A document of the source is stored as ``<name>:<canonical id>`` (:meth:`document_id`)."""

    name: str
    citation_kind: str
    record_url: str
    id_prefix: str = ""
    id_pattern: str = DIGITS
    lowercase_ids: bool = False
    example_id: str = "42"
    url_patterns: tuple[str, ...] = ()
    cites_source_id: bool = False
    guidelines: bool = False

    def url(self, record_id: str) -> str:
        """The page of record ``record_id`` at the source."""
        return self.record_url.format(id=record_id)

    def citation_id(self, record_id: str) -> str:
        """How an answer cites record ``record_id``: ``<kind>:<id>``."""
        return f"{self.citation_kind}:{record_id}"

    def document_id(self, record_id: str) -> str:
        """The stored id of the document of record ``record_id`` (any written form): ``<name>:<canonical id>``."""
        return f"{self.name}:{self.canonical(record_id)}"

    @property
    def numeric(self) -> bool:
        """True when the source's ids are digits after their prefix (then a bare number may stand for one)."""
        return self.id_pattern == DIGITS

    def canonical(self, value: str) -> str:
        """``value`` (the id with or without its prefix, any case) as the id this source writes, e.g.
        ``123`` or ``pmc123`` -> ``PMC123`` for PMC, ``nct01234567`` -> ``NCT01234567``."""
        value = value.strip()
        if self.id_prefix and value.upper().startswith(self.id_prefix):
            value = value[len(self.id_prefix) :]
        if self.lowercase_ids:
            value = value.lower()
        return f"{self.id_prefix}{value}"

    def value_pattern(self) -> str:
        """A regex of this source's ids as written in text (the prefix optional; match it case-insensitively)."""
        if self.id_prefix:
            return rf"(?:{re.escape(self.id_prefix.lower())})?{self.id_pattern}"
        return self.id_pattern

    def valid(self, value: str) -> bool:
        """True when ``value`` is one of this source's ids (prefix optional, any case)."""
        return re.fullmatch(self.value_pattern(), value.strip(), re.IGNORECASE) is not None
