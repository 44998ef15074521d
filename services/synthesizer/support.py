"""Claim support of a verified answer: each cited sentence scored against the passages it cites.

With an API key (``EVIDENTIA_SUPPORT_CHECK=auto`` or ``llm``) a second, cheap Claude call
(``EVIDENTIA_SUPPORT_MODEL``, default ``EVIDENTIA_LLM_FAST_MODEL``) judges every cited sentence at once
through a forced tool; offline (or when that call fails) the calibrated similarity of :mod:`shared.support`
scores them, with the embedding model the index uses (loaded once, lazily, off the event loop; the lexical
score alone if it cannot be loaded).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shared.citations import cited_sentences
from shared.embedding import get_embedder
from shared.embedding.base import Embedder
from shared.events import UnsupportedClaim
from shared.llm import UsageLedger
from shared.models import SearchHit
from shared.settings import Settings
from shared.support import SupportScorer, calibration_for

log = logging.getLogger(__name__)

SUPPORT_TOOL = "record_claim_support"
LLM_THRESHOLD = 0.5


def support_tool() -> dict[str, Any]:
    """The Claude tool definition (name, description, JSON schema) for per-claim support verdicts."""
    return {
        "name": SUPPORT_TOOL,
        "description": "Record, for each numbered claim, how well the passages it cites support it.",
        "input_schema": {
            "type": "object",
            "properties": {
                "verdicts": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "claim": {"type": "integer", "description": "The claim's number."},
                            "support": {
                                "type": "number",
                                "minimum": 0,
                                "maximum": 1,
                                "description": "1: the passages state it; 0: they do not say it or say otherwise.",
                            },
                        },
                        "required": ["claim", "support"],
                    },
                }
            },
            "required": ["verdicts"],
        },
    }


@dataclass
class SupportReport:
    method: Literal["similarity", "lexical", "llm"] | None = None
    checked: int = 0
    unsupported: list[UnsupportedClaim] = field(default_factory=list)
    # The claims scored (sentence without citations, the ids it cites), in order.
    claims: list[tuple[str, list[str]]] = field(default_factory=list)

    def verdict(self, sentence: str, ids: Sequence[str]) -> bool | None:
        """Whether the check found the claim supported; None when it did not score it."""
        key = (sentence, list(ids))
        if key not in self.claims:
            return None
        return not any(u.sentence == sentence and u.citation_ids == list(ids) for u in self.unsupported)


class SupportJudge(Protocol):
    """What the LLM support check needs from Claude (``ClaudeAnswerer.judge_support``)."""

    async def judge_support(
        self, claims: Sequence[tuple[str, Sequence[SearchHit]]], *, ledger: UsageLedger | None = None
    ) -> list[float] | None:
        """One support score (0-1) per ``(claim, cited passages)``, in order; None when no verdict came back."""


class ClaimChecker:
    def __init__(self, settings: Settings, judge: SupportJudge | None = None, embedder: Embedder | None = None):
        self.settings = settings
        self.judge = judge
        self._embedder = embedder
        self._scorer: SupportScorer | None = None
        self._lock = asyncio.Lock()

    @property
    def mode(self) -> str:
        check = self.settings.support.check
        if check == "auto":
            return "llm" if self.judge is not None else "similarity"
        if check == "llm" and self.judge is None:
            return "similarity"
        return check

    async def scorer(self) -> SupportScorer:
        """The similarity scorer, built once: with the support check's own embedding model
        (``EVIDENTIA_SUPPORT_SIMILARITY_MODEL``) when it has a calibration, else word overlap alone."""
        async with self._lock:
            if self._scorer is None:
                embedder = self._embedder
                if embedder is None and self.mode != "lexical":
                    try:
                        embedder = get_embedder(
                            self.settings.embedding.model_copy(update={"model": self.settings.support.similarity_model})
                        )
                        if calibration_for(embedder.name) is None:
                            log.warning(
                                "no support calibration for this embedding model; using word overlap alone",
                                extra={"model": embedder.name},
                            )
                            embedder = None
                        else:
                            await asyncio.to_thread(embedder.warm_up)
                    except Exception:
                        log.exception("no embedding model for the support check; using word overlap alone")
                        embedder = None
                self._scorer = SupportScorer(embedder, self.settings.support.threshold)
            return self._scorer

    async def check(
        self, verified_text: str, hits: Sequence[SearchHit], *, ledger: UsageLedger | None = None
    ) -> SupportReport:
        """How well each cited claim of ``verified_text`` is supported by the passages it cites (at most
        ``max_claims`` claims): by Claude in ``llm`` mode, else by similarity; empty when the check is off.
        A Claude call it makes is recorded in ``ledger``."""
        if self.mode == "off":
            return SupportReport()
        by_id: dict[str, list[SearchHit]] = {}
        for h in hits:
            by_id.setdefault(h.citation_id, []).append(h)
        claims = [
            (sentence, ids, [h for i in ids for h in by_id.get(i, [])])
            for sentence, ids in cited_sentences(verified_text)
        ]
        claims = [c for c in claims if c[2]][: self.settings.support.max_claims]
        if not claims:
            return SupportReport()
        if self.mode == "llm" and self.judge is not None:
            try:
                scores = await self.judge.judge_support([(s, cited) for s, _, cited in claims], ledger=ledger)
            except Exception:
                log.exception("the support check by Claude failed; scoring by similarity")
                scores = None
            if scores is not None and len(scores) == len(claims):
                threshold = self.settings.support.threshold or LLM_THRESHOLD
                return SupportReport(
                    "llm",
                    len(claims),
                    claims=[(s, ids) for s, ids, _ in claims],
                    unsupported=[
                        UnsupportedClaim(
                            sentence=s, citation_ids=ids, score=round(x, 4), threshold=threshold, method="llm"
                        )
                        for (s, ids, _), x in zip(claims, scores, strict=True)
                        if x < threshold
                    ],
                )
        scorer = await self.scorer()
        results = await asyncio.to_thread(
            scorer.score, [s for s, _, _ in claims], [[h.text for h in cited] for _, _, cited in claims]
        )
        return SupportReport(
            scorer.method,
            len(claims),
            claims=[(s, ids) for s, ids, _ in claims],
            unsupported=[
                UnsupportedClaim(
                    sentence=s, citation_ids=ids, score=r.score, threshold=scorer.threshold, method=scorer.method
                )
                for (s, ids, _), r in zip(claims, results, strict=True)
                if not r.supported
            ],
        )
