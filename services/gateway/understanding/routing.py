"""Where an understood question goes, shared by ``/v1/query`` and ``/v1/ask``: its class decides what runs.

- :func:`routed_search` searches guideline sources first for a guideline question (every source when none of
  them clears ``EVIDENTIA_RETRIEVAL_MIN_SCORE``), and any other question as asked;
- :func:`check_interaction` runs the drug interaction check (FDA labels and the literature,
  :mod:`services.gateway.intelligence.interactions`) of a drug-interaction question's drugs, which
  :func:`with_interaction` says before the answer.

Each route taken is added to the response's ``QueryIntelligence.route``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from services.gateway.intelligence.interactions import InteractionCheck, InteractionChecker
from services.gateway.schemas.common import InteractionFindingOut, InteractionOut, LabelFetchOut, QueryIntelligence
from services.gateway.understanding.analysis import Analysis
from services.gateway.understanding.classify import drug_pair
from shared.events import RetrievalReply
from shared.models import SearchFilters, SearchHit, relevant_hits
from shared.sources import guideline_sources


async def check_interaction(
    checker: InteractionChecker, analysis: Analysis, question: str, intelligence: QueryIntelligence
) -> InteractionCheck | None:
    """The drug interaction check of a drug-interaction question's drugs (None for any other class); the route
    taken is added to ``intelligence``."""
    if analysis.classification.category != "drug_interaction":
        return None
    drugs = drug_pair(analysis.enhancement.english_question) or drug_pair(question)
    check = await checker.check(drugs)
    intelligence.route.append(
        f"drug interaction: checked {', '.join(check.drugs) or 'no drugs found'} in their FDA labels "
        f"({check.status.replace('_', ' ')}; {'RxNorm' if check.configured else 'no RxNorm'})"
    )
    return check


def interaction_out(check: InteractionCheck) -> InteractionOut:
    """The HTTP form of an interaction check."""
    return InteractionOut(
        drugs=check.drugs,
        configured=check.configured,
        text=check.text(),
        status=check.status,
        rxcuis={c.query: c.rxcui for c in check.concepts if c.rxcui},
        findings=[
            InteractionFindingOut(
                label_of=f.label_of,
                other=f.other,
                term=f.term,
                section=f.section,
                excerpt=f.excerpt,
                citation_id=f.hit.citation_id,
                url=f.hit.url,
            )
            for f in check.findings
        ],
        labels_read=check.labels_read,
        missing_labels=check.missing,
        missing_reasons=check.missing_reasons,
        label_fetch=None
        if check.label_fetch is None
        else LabelFetchOut(
            drugs=check.label_fetch.drugs,
            job_id=check.label_fetch.job_id,
            state=check.label_fetch.state,
            done=check.label_fetch.done,
            error=check.label_fetch.error,
            waited_ms=check.label_fetch.waited_ms,
        ),
        literature_fetch=check.literature_fetch,
        literature=[h.citation_id for h in check.literature],
    )


def with_interaction(text: str, interaction: InteractionOut | None) -> str:
    """An answer with the interaction check said first."""
    return text if interaction is None else f"Drug interaction check: {interaction.text}\n\n{text}"


async def routed_search(
    retrieve: Callable[[SearchFilters], Awaitable[RetrievalReply]],
    category: str,
    filters: SearchFilters,
    min_score: float,
    intelligence: QueryIntelligence,
) -> list[SearchHit]:
    """The search a question's class calls for: a guideline question (with no source chosen) searches guideline
    sources first and every source when no guideline passage clears ``min_score``; any other searches as asked.
    The route taken is added to ``intelligence``."""
    if category == "guideline" and not filters.sources:
        reply = await retrieve(filters.model_copy(update={"sources": guideline_sources()}))
        useful = relevant_hits(reply.hits, min_score)
        intelligence.route.append(
            f"guideline question: searched guideline sources first ({len(useful)} relevant passages)"
        )
        if useful:
            return reply.hits
        intelligence.route.append("no guideline passage: searched every source")
    else:
        intelligence.route.append(
            f"{category}: searched " + (", ".join(filters.sources) if filters.sources else "every source")
        )
    reply = await retrieve(filters)
    return reply.hits
