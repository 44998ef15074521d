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

from shared.citations import split_sentences
from shared.models import SearchHit

_LABEL = re.compile(r"^(?:[A-Z][A-Z &/,-]{2,40}):\s+")
_WORD = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "being",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "may",
        "might",
        "more",
        "most",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1]


@dataclass(frozen=True)
class ScoredSentence:
    text: str
    hit: SearchHit
    score: float
    position: int


class ExtractiveAnswerer:
    """Chooses up to ``max_sentences`` sentences: term overlap with the question, weighted by passage rank."""

    def __init__(self, max_sentences: int = 4, max_per_source: int = 2, min_relative_score: float = 0.4):
        self.max_sentences = max_sentences
        self.max_per_source = max_per_source
        self.min_relative_score = min_relative_score

    def select(self, question: str, hits: Sequence[SearchHit]) -> list[ScoredSentence]:
        q = Counter(terms(question))
        if not q:
            return []
        doc_freq: Counter[str] = Counter()
        sentences: list[tuple[str, SearchHit, int]] = []
        for hit in hits:
            for i, raw in enumerate(split_sentences(hit.text)):
                s = _LABEL.sub("", raw)  # "RESULTS: ..." -> "..."
                if len(s.split()) < 6 or s.rstrip().endswith("?"):
                    continue  # fragments, and questions (a study restating its aim answers nothing)
                sentences.append((s, hit, i))
                doc_freq.update(set(terms(s)))
        n = max(len(sentences), 1)
        scored: list[ScoredSentence] = []
        for s, hit, pos in sentences:
            words = set(terms(s))
            overlap = sum(math.log(1 + n / (1 + doc_freq[w])) for w in q if w in words)
            if overlap <= 0:
                continue
            rank_weight = 1.0 / (1.0 + 0.15 * (hit.rank - 1))
            # Conclusions and results answer questions better than background.
            bonus = 1.2 if re.search(r"\b(conclu|result|found|associated|reduc|increas|effective)", s.lower()) else 1.0
            scored.append(ScoredSentence(s, hit, overlap * rank_weight * bonus, pos))
        scored.sort(key=lambda x: -x.score)
        # Keep sentences close to the best one: weak matches dilute the answer.
        floor = scored[0].score * self.min_relative_score if scored else 0.0
        scored = [x for x in scored if x.score >= floor]
        chosen: list[ScoredSentence] = []
        per_source: Counter[str] = Counter()
        seen: set[str] = set()
        for item in scored:
            if per_source[item.hit.citation_id] >= self.max_per_source:
                continue
            key = " ".join(terms(item.text))
            if key in seen:  # the same sentence in two chunks (overlap) or two records: quote it once
                continue
            seen.add(key)
            chosen.append(item)
            per_source[item.hit.citation_id] += 1
            if len(chosen) >= self.max_sentences:
                break
        return chosen

    def answer(self, question: str, hits: Sequence[SearchHit]) -> str:
        chosen = self.select(question, hits)
        if not chosen:
            return ""
        lines = [f"- {c.text.rstrip()} [{c.hit.citation_id}]" for c in chosen]
        return (
            "Extractive answer (no language model configured): the most relevant sentences of the retrieved "
            "sources, quoted as published.\n\n" + "\n".join(lines)
        )
