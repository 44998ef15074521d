"""Where an understood question goes, shared by ``/v1/query`` and ``/v1/ask``: its class decides what runs.

- :func:`routed_search` searches guideline sources first for a guideline question (every source when none of
  them clears ``EVIDENTIA_RETRIEVAL_MIN_SCORE``), and any other question as asked;
- :func:`check_interaction` runs the interaction service's check of a drug-interaction question's drugs, which
  :func:`with_interaction` says before the answer.

Each route taken is added to the response's ``QueryIntelligence.route``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.schemas.common import InteractionOut, QueryIntelligence
from services.gateway.understanding.analysis import Analysis
from services.gateway.understanding.classify import drug_pair
from shared.events import RetrievalReply
from shared.models import SearchFilters, SearchHit, relevant_hits
from shared.sources import guideline_sources


async def check_interaction(
    rxnav: RxNavClient, analysis: Analysis, question: str, intelligence: QueryIntelligence
) -> InteractionOut | None:
    """The interaction service's check of a drug-interaction question's drugs (None for any other class); the
    route taken is added to ``intelligence``."""
    if analysis.classification.category != "drug_interaction":
        return None
    drugs = drug_pair(analysis.enhancement.english_question) or drug_pair(question)
    check = await rxnav.check(drugs)
    intelligence.route.append(
        f"drug interaction: checked {', '.join(check.drugs) or 'no drugs found'} "
        f"({'service configured' if check.configured else 'no service configured'})"
    )
    return InteractionOut(drugs=check.drugs, configured=check.configured, text=check.text())


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
