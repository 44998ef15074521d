"""English text as the scorers read it: words, stop words, stems, sentences; and the ``Retry-After`` header.

One owner for what every scorer (the extractive answerer, the claim-support score, the follow-up rule, the MeSH
expansion, the guideline attribution) and every splitter (citations, support, the parser's chunker) takes a word
or a sentence to be, so that a change is made, and measured, once (docs/benchmarks.md, "one text module").

Words. :data:`WORD` on lower-cased text: runs of letters and digits, joined across an inner hyphen or apostrophe
("beta-blocker", "crohn's" are one word). :data:`WORD_PIECE` splits those joins, for matching where the parts of
a compound must match one by one (MeSH descriptors against a question, a plan sentence against guideline
sections). :data:`MESH_WORD` is the MeSH expansion's: pieces as :data:`WORD_PIECE`, but a possessive kept whole
("crohn's" does not match the descriptor "Crohn Disease"); :data:`WORD_PIECE` there would add eponym descriptors
to a few questions, a change the MeSH retrieval benchmark has not measured yet (docs/benchmarks.md).
:data:`LETTER_WORD` is letters of any script, for telling languages apart.

Stop words. :data:`STOP_WORDS` is the one English list for content words. :data:`QUERY_STOP_WORDS` is the short
list the MeSH expansion drops from a question and a descriptor alike: a descriptor's "Under" or "Other" must
still be matched by the question, so the long list would let descriptors in on fewer words.

Stems. :func:`stem_words` (Snowball English, PyStemmer's C build of the Snowball rules) where a word's forms must
meet ("statins", "statin"); :func:`prefix_stem`, a cut to six letters, which the claim-support calibration was
fitted with and which scores that check better than Snowball stems on its labelled set (docs/benchmarks.md);
:func:`singular` (a plural "s" off) for MeSH descriptors. The lexical search does not use any of these: its
analysis is PostgreSQL's ``to_tsvector('english')``, in the store's SQL, and queries go through the same SQL.

Sentences. A sentence ends at ``.``, ``!`` or ``?`` followed by blanks and then a capital, a digit or an opening
bracket (:data:`SENTENCE_END`, :data:`SENTENCE_BREAK`, :func:`split_sentences`).
"""

from __future__ import annotations

import email.utils
import functools
import re
import time
from collections.abc import Collection, Iterable
from datetime import UTC
from typing import Any

WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
WORD_PIECE = re.compile(r"[a-z0-9]+")
MESH_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
LETTER_WORD = re.compile(r"[^\W\d_]+(?:['-][^\W\d_]+)?", re.UNICODE)


def _listed(blank_separated: str) -> frozenset[str]:
    return frozenset(blank_separated.split())


STOP_WORDS = _listed(
    """
    a about above after again against all also among an and any are as at be been before being between both but by
    can could did do does during each either else for from had has have having here how however i if in into is it
    its itself may might more most much must no nor not of on only or other our out over own per same shall should
    so some such than that the their them then there these they this those through thus to too under until up upon
    very via was we were what when where whether which while who whom whose why will with within without would yet
    you your"""
)
QUERY_STOP_WORDS = _listed(
    """
    a an the of and or in on for with to from by is are was were be does do can should what which how why when who
    whom whose than that this these those it its as at into about"""
)

SENTENCE_END = ".!?"
SENTENCE_BREAK = re.compile(rf"(?<=[{re.escape(SENTENCE_END)}])\s+(?=[A-Z0-9(\[])")


def words(text: str) -> list[str]:
    """The words of ``text`` (:data:`WORD`), lower-cased, in order."""
    return WORD.findall(text.lower())


def content_words(text: str, *, min_length: int = 2, stop_words: Collection[str] = STOP_WORDS) -> list[str]:
    """The words of ``text`` that carry content: stop words and words shorter than ``min_length`` left out."""
    return [w for w in words(text) if w not in stop_words and len(w) >= min_length]


def stem_words(words_: Iterable[str]) -> list[str]:
    """Snowball (English) stems of lower-cased words, in order (the stemmer is loaded on first use, so the
    services that only split text never load it)."""
    out: list[str] = _stemmer().stemWords(list(words_))
    return out


@functools.cache
def _stemmer() -> Any:
    import Stemmer  # type: ignore[import-untyped]  # PyStemmer ships no type information

    return Stemmer.Stemmer("english")


def prefix_stem(word: str, length: int = 6) -> str:
    """A crude, language-free stem: the first ``length`` characters."""
    return word[:length]


def singular(word: str) -> str:
    """A plural ``s`` off a word longer than four letters, not ``ss`` ("statins" -> "statin"; "mass" kept)."""
    return word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:data:`SENTENCE_BREAK`), stripped, empty ones left out."""
    return [s.strip() for s in SENTENCE_BREAK.split(text.strip()) if s.strip()]


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date (read as UTC when it names no
    zone); never negative; None when absent, blank or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
