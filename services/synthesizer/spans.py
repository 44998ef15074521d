"""Each citation of an answer tied to the sentences of its source that the answer's claims rest on.

For every cited sentence of the verified answer and every source it cites, the span is found in the source's
retrieved passages (chunks):

- the claim *is* a sentence of the passage (extractive answers quote): that sentence, exactly (``quote``);
- otherwise the sentence the claim-support check's scorer matches best (:meth:`SupportScorer.best_sentences`),
  marked supported or not by the check's verdict on the claim. A claim the check found unsupported, or one
  with no sentence of the source sharing a word with it, gets a span without a quote (``supported`` false).

Offsets are into the chunk's stored text (the retrieved passage) and, where the chunk's place in its document
is known, into the document's full text; the claim's own place is its offsets in the answer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from services.synthesizer.support import ClaimChecker, SupportReport
from shared.citations import CitedClaim, cited_claims
from shared.events import Citation, CitationSpan
from shared.models import SearchHit

_BLANK = re.compile(r"\s+")


def find_quote(sentence: str, passage: str) -> tuple[int, int] | None:
    """Where ``sentence`` is in ``passage`` word for word, blanks aside (an answer's tidying may have joined or
    dropped them): ``(start, end)`` of the passage's text, or None."""
    needle = _BLANK.sub("", sentence)
    if not needle:
        return None
    keep = [i for i, ch in enumerate(passage) if not ch.isspace()]
    hay = "".join(passage[i] for i in keep)
    at = hay.find(needle)
    if at < 0 and needle.endswith("."):  # the answer may have ended a quoted sentence with a full stop
        needle = needle[:-1]
        at = hay.find(needle) if needle else -1
    if at < 0:
        return None
    return keep[at], keep[at + len(needle) - 1] + 1


Method = Literal["quote", "similarity", "lexical", "llm"] | None


def _span(
    claim: CitedClaim, hit: SearchHit, start: int, end: int, supported: bool | None, score: float, method: Method
) -> CitationSpan:
    base = hit.char_start
    return CitationSpan(
        claim=claim.plain,
        answer_start=claim.start,
        answer_end=claim.end,
        document_id=hit.document_id,
        chunk_id=hit.chunk_id,
        section=hit.section,
        quote=hit.text[start:end],
        start=start,
        end=end,
        document_start=base + start if base is not None else None,
        document_end=base + end if base is not None else None,
        supported=supported,
        score=score,
        method=method,
    )


def _unsupported(claim: CitedClaim, hit: SearchHit, method: Method) -> CitationSpan:
    return CitationSpan(
        claim=claim.plain,
        answer_start=claim.start,
        answer_end=claim.end,
        document_id=hit.document_id,
        supported=False,
        method=method,
    )


async def citation_spans(
    answer: str,
    citations: Sequence[Citation],
    hits: Sequence[SearchHit],
    support: SupportReport,
    checker: ClaimChecker,
    created_at: datetime,
) -> list[Citation]:
    """``citations`` with each one's spans, its first citing sentence (text and place in ``answer``) and the
    answer's ``created_at``."""
    by_id: dict[str, list[SearchHit]] = {}
    for h in hits:
        by_id.setdefault(h.citation_id, []).append(h)
    claims = cited_claims(answer)
    spans: dict[str, list[CitationSpan]] = {c.citation_id: [] for c in citations}
    pending: list[tuple[CitedClaim, str, bool | None]] = []  # no exact quote: matched by the scorer
    for claim in claims:
        verdict = support.verdict(claim.plain, claim.ids)
        for cid in claim.ids:
            if cid not in spans:
                continue
            quoted = next(
                ((h, at) for h in by_id.get(cid, []) if (at := find_quote(claim.plain, h.text)) is not None), None
            )
            if quoted is not None:
                hit, (lo, hi) = quoted
                spans[cid].append(_span(claim, hit, lo, hi, supported=True, score=1.0, method="quote"))
            elif verdict is False:
                spans[cid].append(_unsupported(claim, by_id[cid][0], support.method))
            else:
                pending.append((claim, cid, verdict))
    if pending:
        scorer = await checker.scorer()
        matches = await asyncio.to_thread(
            scorer.best_sentences,
            [c.plain for c, _, _ in pending],
            [[h.text for h in by_id[cid]] for _, cid, _ in pending],
        )
        for (claim, cid, verdict), match in zip(pending, matches, strict=True):
            if match is None:
                spans[cid].append(_unsupported(claim, by_id[cid][0], support.method or scorer.method))
                continue
            hit = by_id[cid][match.passage]
            method = support.method if verdict is not None else scorer.method
            spans[cid].append(
                _span(claim, hit, match.start, match.end, supported=verdict, score=match.score, method=method)
            )
    out = []
    for c in citations:
        mine = sorted(spans[c.citation_id], key=lambda s: s.answer_start)
        first = mine[0] if mine else None
        out.append(
            c.model_copy(
                update={
                    "spans": mine,
                    "text": first.claim if first else None,
                    "start": first.answer_start if first else None,
                    "end": first.answer_end if first else None,
                    "created_at": created_at,
                }
            )
        )
    return out
