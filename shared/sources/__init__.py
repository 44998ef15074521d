"""The source registry: every source Evidentia ingests, by name, and the rules every service reads them by.

A service that needs to know something of a source (a record's link, how an answer cites it, which sources
hold guidelines) asks here instead of testing the source's name. The order of :data:`SOURCES` is the order of
strength of a document's identities: a document with a PMID is cited and linked by it, else by its PMC id, else
by its own source's id when that source cites its own ids (:func:`identity_of`).

A new source adds its rule module here (``shared/sources/<name>.py``), its name to ``shared.models.Source``, and
its fetching half to ``services/fetcher/sources/`` (see ``docs/architecture.md``, "Sources").
"""

from __future__ import annotations

from shared.sources.base import SourceRule
from shared.sources.bookshelf import BOOKSHELF
from shared.sources.clinicaltrials import CLINICALTRIALS
from shared.sources.fdalabel import FDA_LABEL
from shared.sources.pmc import PMC
from shared.sources.pubmed import PUBMED

#: Every source by name, strongest identity first.
SOURCES: dict[str, SourceRule] = {rule.name: rule for rule in (PUBMED, PMC, BOOKSHELF, CLINICALTRIALS, FDA_LABEL)}


def source_rule(name: str) -> SourceRule:
    """The rule of source ``name``; ``KeyError`` naming the known sources for any other name."""
    try:
        return SOURCES[name]
    except KeyError:
        raise KeyError(f"unknown source {name!r} (known: {', '.join(SOURCES)})") from None


def rule_by_kind(kind: str) -> SourceRule | None:
    """The source cited as ``kind`` (``PMID``, ``PMCID``, ``NBK``, ``NCT``, ``FDA``; any case), or None."""
    upper = kind.upper()
    return next((r for r in SOURCES.values() if r.citation_kind == upper), None)


def identity_of(source: str, source_id: str, pmid: str | None, pmcid: str | None) -> tuple[SourceRule, str] | None:
    """A document's strongest identity (rule and record id): its PMID, else its PMC id, else its own
    ``source_id`` where its source cites those; None when it has none (it is then cited by its document id and
    has no link)."""
    if pmid:
        return PUBMED, pmid
    if pmcid:
        return PMC, pmcid
    rule = SOURCES.get(source)
    if rule is not None and rule.cites_source_id:
        return rule, source_id
    return None


def record_url(source: str, source_id: str, pmid: str | None, pmcid: str | None) -> str | None:
    """The link of a document (see :func:`identity_of`), or None when it has no identity to link."""
    found = identity_of(source, source_id, pmid, pmcid)
    return found[0].url(found[1]) if found is not None else None


def citation_id(source: str, source_id: str, pmid: str | None, pmcid: str | None) -> str:
    """The id an answer cites a document by (see :func:`identity_of`), else its ``<source>:<source id>``."""
    found = identity_of(source, source_id, pmid, pmcid)
    return found[0].citation_id(found[1]) if found is not None else f"{source}:{source_id}"


def guideline_sources() -> list[str]:
    """The sources whose documents are clinical guidelines."""
    return [r.name for r in SOURCES.values() if r.guidelines]


__all__ = [
    "SOURCES",
    "SourceRule",
    "citation_id",
    "guideline_sources",
    "identity_of",
    "record_url",
    "rule_by_kind",
    "source_rule",
]
