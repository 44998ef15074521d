"""Citation handling, one owner for every channel: find the ids a text cites, keep only those among its sources,
number them.

Answers cite inline as ``[PMID:12345678]``, ``[PMCID:PMC123]`` or ``[NBK:NBK1116]``; several ids may share
one bracket (``[PMID:1, PMID:2]``). Ids not among the sources are removed and reported; sentences that
make a claim without any citation are flagged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.events import Citation, CitationCheck
from shared.models import SearchHit

_BRACKET = re.compile(r"\[((?:\s*(?:PMID|PMCID|NBK)\s*:\s*[A-Za-z0-9]+\s*[,;]?)+)\]")
_ID = re.compile(r"(PMID|PMCID|NBK)\s*:\s*([A-Za-z0-9]+)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\[])")


def normalise(kind: str, value: str) -> str:
    value = value.strip()
    if kind == "PMCID" and not value.upper().startswith("PMC"):
        value = f"PMC{value}"
    if kind == "NBK" and not value.upper().startswith("NBK"):
        value = f"NBK{value}"
    return f"{kind}:{value}"


def cited_ids(text: str) -> list[str]:
    """Every cited id in order of first appearance, without repeats."""
    out: dict[str, None] = {}
    for bracket in _BRACKET.finditer(text):
        for kind, value in _ID.findall(bracket.group(1)):
            out[normalise(kind, value)] = None
    return list(out)


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


@dataclass
class VerifiedAnswer:
    text: str
    citations: list[Citation]
    check: CitationCheck


class CitationVerifier:
    """Checks an answer's citations against the sources it was given, and renumbers them [1], [2]...

    ``numbering`` maps citation ids to display numbers already used earlier in a conversation, so a
    paper keeps its number across turns; new ids continue the sequence.
    """

    def __init__(self, sources: Sequence[SearchHit], numbering: dict[str, int] | None = None):
        self.sources: dict[str, SearchHit] = {}
        for hit in sources:
            self.sources.setdefault(hit.citation_id, hit)
        self.numbering = dict(numbering or {})

    def verify(self, text: str, *, renumber: bool = False) -> VerifiedAnswer:
        cited = cited_ids(text)
        verified = [c for c in cited if c in self.sources]
        removed = [c for c in cited if c not in self.sources]

        def fixer(numbers: bool) -> Callable[[re.Match[str]], str]:
            def fix(match: re.Match[str]) -> str:
                keep = [normalise(k, v) for k, v in _ID.findall(match.group(1))]
                keep = [c for c in dict.fromkeys(keep) if c in self.sources]
                if not keep:
                    return ""
                if numbers:
                    return "".join(f"[{self._number(c)}]" for c in keep)
                return "[" + ", ".join(keep) + "]"

            return fix

        for c in verified:  # numbers follow the order of first appearance
            self._number(c)
        with_ids = _tidy(_BRACKET.sub(fixer(False), text))
        cleaned = _tidy(_BRACKET.sub(fixer(True), text)) if renumber else with_ids
        # A claim whose only citation was removed is now uncited, and flagged as such.
        uncited = [s for s in split_sentences(with_ids) if _is_claim(s) and not _BRACKET.search(s)]
        citations = [self._citation(c) for c in sorted(verified, key=self._number)]
        return VerifiedAnswer(
            cleaned,
            citations,
            CitationCheck(cited=cited, verified=verified, removed=removed, uncited_sentences=uncited),
        )

    def _number(self, cid: str) -> int:
        if cid not in self.numbering:
            self.numbering[cid] = max(self.numbering.values(), default=0) + 1
        return self.numbering[cid]

    def _citation(self, cid: str) -> Citation:
        hit = self.sources[cid]
        return Citation(
            number=self._number(cid),
            citation_id=cid,
            document_id=hit.document_id,
            title=hit.title,
            journal=hit.journal,
            year=hit.year,
            url=hit.url,
        )


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t]+([.,;:!?])", r"\1", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _is_claim(sentence: str) -> bool:
    """Headings, questions and very short fragments make no claim that needs a source."""
    s = sentence.strip()
    if len(s.split()) < 5 or s.endswith("?") or s.endswith(":") or s.startswith("#"):
        return False
    lowered = s.lower()
    return not lowered.startswith(
        ("note:", "disclaimer", "this answer", "this is not medical advice", "extractive answer")
    )
