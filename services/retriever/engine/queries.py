"""Query forms: what is embedded and what is matched lexically for each kind of query.

* a free question: embedded and matched as written;
* a :class:`shared.models.QueryForm` (``therapeutic``, ``condition-findings``): its text (``QueryForm.text``,
  rendered here only and sent back to the gateway, which shows it) is embedded and given to the reranker,
  while BM25 matches its keywords (drug and disease; the condition and the findings' values).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shared.models import QueryForm, cap_query

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderedQuery:
    dense: str
    """Text the embedder encodes (with the model's query prefix added there)."""
    lexical: str
    """Text BM25 matches."""
    rerank: str
    """What a reranker is told the query is."""

    def capped(self, max_terms: int) -> RenderedQuery:
        """Each text cut to the limits on a searched query (:func:`shared.models.cap_query`): a query form's
        fields are bounded one by one, what they render to is bounded here (and at the gateway: 422)."""
        out = RenderedQuery(
            cap_query(self.dense, max_terms), cap_query(self.lexical, max_terms), cap_query(self.rerank, max_terms)
        )
        if out != self:
            log.warning("query cut to the limits on a searched query", extra={"max_terms": max_terms})
        return out


def render(query: str | None, form: QueryForm | None = None) -> RenderedQuery:
    """What each leg searches with: a free question as written, or the query form's text (dense, reranker)
    and its keywords (lexical). One of the two must be given."""
    if form is None:
        if query is None:
            raise ValueError("give a query or a query form")
        return RenderedQuery(query, query, query)
    text = form.text()
    return RenderedQuery(text, form.keywords(), text)
