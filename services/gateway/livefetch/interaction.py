"""What the drug interaction check fetches at question time, under the live fetch's rule
(:func:`.plan.plan_fetch`): a caller whose fetch mode is ``auto`` or ``always`` (which needs the ``ingest`` scope)
may have the check fetch; ``never`` (asked for, the default of the deployment, or a key without ``ingest``)
reads the store only.

- :meth:`InteractionFetch.labels`: the FDA labels of drugs with none stored, from openFDA (:mod:`.labels`),
  waited for within ``EVIDENTIA_ASK_FETCH_LABEL_WAIT_S``;
- :meth:`InteractionFetch.literature`: PubMed searched for the pair (every drug's name ANDed, not relaxed: a
  paper on one of the drugs is no evidence on the pair) by the live fetch runner (:mod:`.runner`), within
  ``EVIDENTIA_ASK_FETCH_BUDGET_S``.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.gateway.livefetch.labels import LabelFetch, LabelFetcher
from services.gateway.livefetch.plan import FetchPlan
from services.gateway.livefetch.query import Concept, pubmed_query
from services.gateway.livefetch.runner import LiveFetcher
from services.gateway.schemas.common import FetchReport

REASON = "drug interaction check: no stored literature passage names every drug"


def pair_terms(names: Sequence[str]) -> list[str]:
    """The PubMed search of a drug pair as the runner's terms: one clause (so it is never relaxed to fewer
    drugs), each name a word or a quoted phrase, ANDed."""
    clauses = [Concept(n.strip().lower()).clause() for n in names if n.strip()]
    return [f"({pubmed_query(clauses)})"] if len(clauses) >= 2 else []


class InteractionFetch:
    """The check's fetches for one caller whose plan allows them."""

    def __init__(self, plan: FetchPlan, labels: LabelFetcher, live: LiveFetcher | None):
        self.plan = plan
        self.label_fetcher = labels
        self.live = live

    async def labels(self, drugs: Sequence[str], trace_id: str) -> LabelFetch:
        return await self.label_fetcher.fetch(drugs, trace_id)

    async def literature(self, names: Sequence[str], trace_id: str) -> FetchReport | None:
        """The live fetch's report of PubMed searched for the pair (None without a PubMed fetch)."""
        if self.live is None:
            return None
        return await self.live.run(pair_terms(names), trace_id, self.plan.mode, self.plan.requested, REASON)


def interaction_fetch(
    plan: FetchPlan, labels: LabelFetcher | None, live: LiveFetcher | None
) -> InteractionFetch | None:
    """The check's fetches for a caller with ``plan``: None (the store only) for ``never`` or without a label
    fetcher."""
    if plan.mode == "never" or labels is None:
        return None
    return InteractionFetch(plan, labels, live)
