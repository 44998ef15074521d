"""Whether a stored source is on the question's topic: the test ``auto`` applies before it answers from the store
alone.

The relevance floor (:func:`shared.models.relevant_hits`) says a passage is close enough to cite; it does not say
the store holds the topic: with a small embedding model, abstracts on other medical topics clear it. So a
retrieved source counts towards ``auto``'s :data:`.plan.MIN_SOURCES` only when it also **covers the question's
concepts**: at least :data:`MIN_COVERAGE` of the question's concepts (:func:`.query.question_concepts`: its
content words, a known disease or lay name as one concept with its synonym and MeSH descriptor) occur in the
source's retrieved passages or title, a concept occurring when every word of one of its names does (Snowball
stems, so "fracture" meets "fractures"). A question with no concepts is judged by the floor alone.

The threshold was chosen on held-out data, not on the live-fetch benchmark's questions
(``bench/on_topic_threshold.py``; figures in docs/benchmarks.md): the bundled PubMedQA questions without the
benchmark's, in five folds; for each question its own abstract without its title (the questions are their
titles reworded) is on topic and the three other records that cover most of its concepts (the best an off-topic
store could offer) are off topic; the threshold with the best balanced accuracy on four folds is scored on the
fifth, and :data:`MIN_COVERAGE` is the one chosen on all of them. The test is lexical: where the store is large
enough to hold abstracts sharing most of a question's words on other topics it is weaker (SciFact's figures in
docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.gateway.livefetch.query import Concept
from shared.models import SearchHit
from shared.text import STOP_WORDS, stem_words, words

MIN_COVERAGE = 0.6
"""Least share of the question's concepts a source must cover to count as on topic (chosen on held-out data)."""


def text_stems(texts: Iterable[str]) -> set[str]:
    """The Snowball stems of the content words of ``texts`` taken together."""
    return {s for t in texts for s in stem_words(w for w in words(t) if w not in STOP_WORDS)}


def _phrasing_stems(concept: Concept) -> list[set[str]]:
    """Each name of ``concept`` as the stems of its content words (names with none left out)."""
    return [s for s in (text_stems([p]) for p in concept.phrasings) if s]


def coverage(concepts: Sequence[Concept], stems: set[str]) -> float:
    """The share of ``concepts`` occurring among ``stems`` (:func:`text_stems`; 1.0 when there are no concepts)."""
    if not concepts:
        return 1.0
    covered = sum(1 for c in concepts if any(s <= stems for s in _phrasing_stems(c)))
    return covered / len(concepts)


def on_topic_sources(hits: Sequence[SearchHit], concepts: Sequence[Concept], min_coverage: float = MIN_COVERAGE) -> int:
    """Distinct sources (citation ids) among ``hits`` whose passages and title, together, cover at least
    ``min_coverage`` of ``concepts``."""
    texts: dict[str, list[str]] = {}
    for h in hits:
        texts.setdefault(h.citation_id, [h.title]).append(h.text)
    return sum(1 for ts in texts.values() if coverage(concepts, text_stems(ts)) >= min_coverage)
