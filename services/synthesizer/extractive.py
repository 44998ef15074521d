"""Offline answers: the sentences of the retrieved passages that best match the question, each cited.

No language model is involved, so nothing is invented: every sentence is quoted from a source and
carries that source's id. The answer says it is extractive.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from shared.models import SearchHit
from shared.text import content_words, split_sentences, stem_words

_LABEL = re.compile(r"^(?:[A-Z][A-Z &/,-]{2,40}):\s+")
# Sentences that report a finding (what answers a question), not background or methods.
_FINDING = re.compile(
    r"\b(conclu|result|found|find|show|demonstrat|suggest|indicat|associat|reduc|increas|decreas|improv|"
    r"effective|efficacy|significant|higher|lower|compared|no difference|did not|were not|was not|risk|odds|"
    r"ratio|p\s*[<=>])",
    re.IGNORECASE,
)


def terms(text: str) -> list[str]:
    """The content words of ``text``: lower-cased, stop words and one-letter words left out, in order."""
    return content_words(text)


def stems(text: str) -> set[str]:
    """The content words of ``text``, stemmed (Snowball English): "statins" and "statin" match."""
    return set(stem_words(terms(text)))


def nearest_source(hits: Sequence[SearchHit]) -> str:
    """The citation id of the passage nearest to the question in meaning.

    Reranked hits (a reranker read question and passage together) are in the reranker's order: the first
    ranked. Otherwise, when every hit carries its dense (embedding) similarity, the most similar one: a
    hybrid rank fuses two orders by position only, so a passage that repeats one question word ranks high
    lexically and can come first while a passage about the question as a whole comes second or third.
    Without dense scores (lexical search), the first ranked. Ties go to the better rank.
    """
    if not hits:
        raise ValueError("no hits")
    by_rank = sorted(hits, key=lambda h: h.rank)
    if any(h.rerank_score is not None for h in hits) or any(h.dense_score is None for h in hits):
        return by_rank[0].citation_id
    return max(by_rank, key=lambda h: h.dense_score or 0.0).citation_id


@dataclass(frozen=True)
class ScoredSentence:
    text: str
    hit: SearchHit
    score: float
    position: int


@dataclass(frozen=True)
class _Candidate:
    text: str
    hit: SearchHit
    position: int
    words: frozenset[str]


class ExtractiveAnswerer:
    """Quotes the sentences that answer the question, from the source that answers it best.

    1. Every sentence of the passages is scored against the question: the IDF-weighted share of the
       question's (stemmed) content words it contains, times a bonus for reporting a finding, times a
       weight that falls with the passage's retrieval rank.
    2. The *anchor* is the source nearest to the question in meaning (see :meth:`_anchor`), unless another
       source's best sentence matches the question ``anchor_margin`` times as well: an answer rests on
       one paper first.
    3. Up to ``max_per_source`` anchor sentences above the relevance floor (``min_coverage`` of the
       question, and ``min_relative_score`` of the best anchor sentence) are quoted. When none clears the
       floor, the anchor's best-matching sentence is quoted alone: the passage retrieval judged nearest
       is cited rather than left out of the answer.
    4. At most ``max_off_source`` sentence of another source is added: one that matches the question
       (rank aside) at least ``off_source_ratio`` times as well as the best anchor sentence and reports
       a finding, or one that matches it ``cover_ratio`` times as well, finding or not (a source that
       covers the question clearly better is never dropped because another is the anchor). The
       strongest such sentence is taken, whatever its passage's rank; a near-duplicate topic from an
       unrelated paper is not quoted.
    """

    def __init__(
        self,
        max_sentences: int = 4,
        max_per_source: int = 3,
        min_relative_score: float = 0.4,
        min_coverage: float = 0.1,
        max_off_source: int = 1,
        off_source_ratio: float = 1.0,
        anchor_margin: float = 3.0,
        cover_ratio: float = 1.25,
    ):
        self.max_sentences = max_sentences
        self.max_per_source = max_per_source
        self.min_relative_score = min_relative_score
        self.min_coverage = min_coverage
        self.max_off_source = max_off_source
        self.off_source_ratio = off_source_ratio
        self.anchor_margin = anchor_margin
        self.cover_ratio = cover_ratio

    def _candidates(self, hits: Sequence[SearchHit]) -> list[_Candidate]:
        out: list[_Candidate] = []
        for hit in hits:
            for i, raw in enumerate(split_sentences(hit.text)):
                s = _LABEL.sub("", raw)  # "RESULTS: ..." -> "..."
                if len(s.split()) < 6 or s.rstrip().endswith("?"):
                    continue  # fragments, and questions (a study restating its aim answers nothing)
                out.append(_Candidate(s, hit, i, frozenset(stems(s))))
        return out

    def select(self, question: str, hits: Sequence[SearchHit]) -> list[ScoredSentence]:
        """The sentences of ``hits`` that answer ``question`` best, in the order they are quoted; empty when
        the question has no content word or no sentence clears the relevance floor."""
        q = stems(question)
        if not q:
            return []
        candidates = self._candidates(hits)
        doc_freq: Counter[str] = Counter()
        for c in candidates:
            doc_freq.update(c.words)
        n = max(len(candidates), 1)
        weight = {w: math.log(1 + n / (1 + doc_freq[w])) for w in q}
        total = sum(weight.values())
        if total <= 0:
            return []

        def coverage(words: frozenset[str] | set[str]) -> float:
            return sum(weight[w] for w in q if w in words) / total

        scored: list[tuple[ScoredSentence, float, float]] = []
        for c in candidates:
            cov = coverage(c.words)
            if cov <= 0:
                continue
            rank_weight = 1.0 / (1.0 + 0.15 * (c.hit.rank - 1))
            bonus = 1.2 if _FINDING.search(c.text) else 1.0
            strength = cov * bonus  # how well it answers, whatever the passage's rank
            scored.append((ScoredSentence(c.text, c.hit, strength * rank_weight, c.position), cov, strength))
        if not scored:
            return []
        scored.sort(key=lambda x: -x[0].score)
        anchor = self._anchor(scored)
        mine = [x for x in scored if x[0].hit.citation_id == anchor]
        best = mine[0][0].score if mine else scored[0][0].score
        best_strength = max((x[2] for x in mine), default=0.0)
        floor = best * self.min_relative_score
        chosen: list[ScoredSentence] = []
        seen: set[str] = set()

        def take(item: ScoredSentence) -> bool:
            key = " ".join(terms(item.text))
            if key in seen:  # the same sentence in two chunks (overlap) or two records: quote it once
                return False
            seen.add(key)
            chosen.append(item)
            return True

        for s, cov, _ in mine:
            if len(chosen) >= min(self.max_per_source, self.max_sentences):
                break
            if s.score >= floor and cov >= self.min_coverage:
                take(s)
        if not chosen and mine:
            take(mine[0][0])  # nothing clears the floor: the nearest source's best match, alone
        off = 0
        for s, cov, strength in sorted(scored, key=lambda x: -x[2]):  # how well it answers, rank aside
            if off >= self.max_off_source or len(chosen) >= self.max_sentences:
                break
            if s.hit.citation_id == anchor or cov < self.min_coverage:
                continue
            adds = strength >= best_strength * self.off_source_ratio and _FINDING.search(s.text) is not None
            covers = strength >= best_strength * self.cover_ratio
            if (adds or covers) and take(s):
                off += 1
        return chosen

    def _anchor(self, scored: Sequence[tuple[ScoredSentence, float, float]]) -> str:
        """The source that answers: the one retrieval judged nearest to the question (see
        :func:`nearest_source`), unless another source's best sentence matches the question
        ``anchor_margin`` times as well (retrieval read the whole passage; one sentence outweighs it only
        clearly)."""
        best: dict[str, float] = {}
        for s, _, strength in scored:
            cid = s.hit.citation_id
            best[cid] = max(best.get(cid, 0.0), strength)
        first = nearest_source([s.hit for s, _, _ in scored])
        challenger = max(best, key=lambda cid: best[cid])
        if best[challenger] >= self.anchor_margin * best[first]:
            return challenger
        return first

    def answer(self, question: str, hits: Sequence[SearchHit]) -> str:
        """The extractive answer: a labelled list of the selected sentences, each with its source's citation id;
        empty when nothing relevant was found."""
        chosen = self.select(question, hits)
        if not chosen:
            return ""
        lines = [f"- {c.text.rstrip()} [{c.hit.citation_id}]" for c in chosen]
        return (
            "Extractive answer (no language model configured): the most relevant sentences of the retrieved "
            "sources, quoted as published.\n\n" + "\n".join(lines)
        )
