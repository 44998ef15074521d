"""Whether a question searches PubMed: the caller's ``fetch`` mode, what its API key may do, and how many
retrieved sources clear the relevance floor.

- ``always``: every question searches PubMed; needs the ``ingest`` scope (fetching is ingestion), else 403.
- ``auto`` (the default for a key with ``ingest``): PubMed is searched when fewer than :data:`MIN_SOURCES`
  distinct retrieved sources are on topic: clear the relevance floor (:func:`shared.models.relevant_hits`, the
  one rule) and cover the question's concepts (:func:`.topic.on_topic_sources`, the one rule for that; a store
  of other topics clears the floor of a small embedding model). Without ``ingest`` it acts as ``never`` and the
  response says so.
- ``never`` (the default for a key without ``ingest``): the store only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from services.gateway.livefetch.query import Concept
from services.gateway.livefetch.topic import MIN_COVERAGE, on_topic_sources
from services.gateway.schemas.common import FetchMode
from shared.models import SearchHit, relevant_hits

MIN_SOURCES = 3
"""Fewest distinct on-topic sources for ``auto`` to answer from the store alone."""

NO_SCOPE = (
    "this API key lacks the `ingest` scope, which fetching from PubMed needs: answered from the store only "
    "(`fetch` acts as `never`)"
)


class FetchNotAllowed(Exception):
    """``fetch: always`` from a key without the ``ingest`` scope (HTTP 403)."""


@dataclass(frozen=True)
class FetchPlan:
    """The mode in force for one question and, when it differs from what was asked, why."""

    requested: FetchMode | None
    mode: FetchMode
    note: str | None = None


STORE_ONLY = FetchPlan(None, "never")
"""No PubMed search (callers other than the ask routes)."""


def plan_fetch(requested: FetchMode | None, may_ingest: bool, default: FetchMode = "auto") -> FetchPlan:
    """The mode in force: ``requested`` (None: ``default``, the operator's ``EVIDENTIA_ASK_FETCH_DEFAULT``, for a
    key that may ingest, else ``never``) as the key's scopes allow. Raises :class:`FetchNotAllowed` for
    ``always`` without ``ingest``."""
    if may_ingest:
        return FetchPlan(requested, requested or default)
    if requested == "always":
        raise FetchNotAllowed(
            "this API key lacks the `ingest` scope, which `fetch: always` needs (PubMed records are ingested): "
            "send `fetch: auto` or `never`, or use a key with `ingest`"
        )
    return FetchPlan(requested, "never", None if requested == "never" else NO_SCOPE)


FETCH_403: dict[int | str, dict[str, Any]] = {
    403: {"description": "`fetch: always` from an API key without the `ingest` scope"}
}
"""The routes' OpenAPI entry for :func:`plan_for`'s refusal."""


def plan_for(requested: FetchMode | None, scopes: frozenset[str], default: FetchMode) -> FetchPlan:
    """:func:`plan_fetch` for a caller's scopes as a route answers it: HTTP 403 with the reason for ``always``
    without the ``ingest`` scope."""
    try:
        return plan_fetch(requested, "ingest" in scopes, default)
    except FetchNotAllowed as exc:
        raise HTTPException(403, str(exc)) from exc


def relevant_sources(hits: Sequence[SearchHit], floor: float) -> int:
    """Distinct sources (citation ids) among ``hits`` that clear the relevance floor."""
    return len({h.citation_id for h in relevant_hits(hits, floor)})


def should_search(
    mode: FetchMode, hits: Sequence[SearchHit], floor: float, concepts: Sequence[Concept] = ()
) -> tuple[bool, str]:
    """Whether to search PubMed after retrieving ``hits`` from the store for a question of ``concepts``
    (:func:`.query.question_concepts`), and why (said in the response)."""
    if mode == "never":
        return False, "fetch: never"
    if mode == "always":
        return True, "fetch: always"
    n = relevant_sources(hits, floor)
    on_topic = on_topic_sources(relevant_hits(hits, floor), concepts)
    share = f"{MIN_COVERAGE:.0%} of the question's concepts"
    if on_topic >= MIN_SOURCES:
        return False, f"{on_topic} stored sources are on topic (clear the relevance floor and cover {share})"
    if n >= MIN_SOURCES:
        return True, (
            f"{n} stored sources clear the relevance floor but only {on_topic} cover {share} "
            f"({MIN_SOURCES} needed to skip PubMed)"
        )
    return True, f"only {n} stored sources clear the relevance floor (fewer than {MIN_SOURCES})"
