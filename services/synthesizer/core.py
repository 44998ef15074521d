"""The synthesizer's core: question + passages -> a verified, cited answer. No Kafka here."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

from services.synthesizer.citations import CitationVerifier
from services.synthesizer.extractive import ExtractiveAnswerer
from services.synthesizer.llm import ClaudeAnswerer
from services.synthesizer.safety import DISCLAIMER, EMERGENCY_ANSWER, is_emergency
from shared.events import SynthesisReply, SynthesisRequest, SynthesisToken
from shared.models import SearchHit
from shared.settings import Settings

INSUFFICIENT = (
    "The retrieved evidence is insufficient to answer this question: no stored source is relevant enough. "
    "Try rephrasing, widening the filters, or ingesting more literature on the topic."
)


class Synthesizer:
    def __init__(self, settings: Settings, llm: ClaudeAnswerer | None = None):
        self.settings = settings
        self.llm = llm
        self.extractive = ExtractiveAnswerer()

    @classmethod
    def from_settings(cls, settings: Settings) -> Synthesizer:
        llm = ClaudeAnswerer(settings.llm) if settings.llm.anthropic_api_key else None
        return cls(settings, llm)

    def relevant(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """Passages worth citing: dense similarity at or above the threshold (lexical-only hits pass)."""
        floor = self.settings.retrieval.min_score
        return [h for h in hits if h.dense_score is None or h.dense_score >= floor]

    def _early(self, req: SynthesisRequest, start: float) -> SynthesisReply | None:
        if is_emergency(req.question):
            return SynthesisReply(trace_id=req.trace_id, answer=EMERGENCY_ANSWER, mode="emergency",
                                  disclaimer=DISCLAIMER, took_ms=_ms(start))
        if not self.relevant(req.passages):
            return SynthesisReply(trace_id=req.trace_id, answer=INSUFFICIENT, mode="insufficient-evidence",
                                  disclaimer=DISCLAIMER, took_ms=_ms(start))
        return None

    def _finish(self, req: SynthesisRequest, raw: str, mode: str, start: float) -> SynthesisReply:
        hits = self.relevant(req.passages)
        verified = CitationVerifier(hits).verify(raw)
        if not verified.citations:
            return SynthesisReply(trace_id=req.trace_id, answer=INSUFFICIENT, mode="insufficient-evidence",
                                  disclaimer=DISCLAIMER, citation_check=verified.check, took_ms=_ms(start))
        return SynthesisReply(
            trace_id=req.trace_id, answer=verified.text, mode=mode,  # type: ignore[arg-type]
            model=self.llm.model if mode == "llm" and self.llm else None,
            citations=verified.citations, citation_check=verified.check, disclaimer=DISCLAIMER,
            took_ms=_ms(start),
        )

    async def answer(self, req: SynthesisRequest) -> SynthesisReply:
        start = time.perf_counter()
        early = self._early(req, start)
        if early is not None:
            return early
        hits = self.relevant(req.passages)
        if self.llm is not None:
            return self._finish(req, await self.llm.answer(req.question, hits), "llm", start)
        return self._finish(req, self.extractive.answer(req.question, hits), "extractive", start)

    async def stream(self, req: SynthesisRequest) -> AsyncIterator[SynthesisToken | SynthesisReply]:
        """Token events in order, then the final verified reply."""
        start = time.perf_counter()
        early = self._early(req, start)
        if early is not None:
            yield SynthesisToken(trace_id=req.trace_id, seq=0, text=early.answer)
            yield early
            return
        hits = self.relevant(req.passages)
        parts: list[str] = []
        if self.llm is not None:
            seq = 0
            async for text in self.llm.stream(req.question, hits):
                parts.append(text)
                yield SynthesisToken(trace_id=req.trace_id, seq=seq, text=text)
                seq += 1
            yield self._finish(req, "".join(parts), "llm", start)
        else:
            raw = self.extractive.answer(req.question, hits)
            for seq, line in enumerate(raw.splitlines(keepends=True)):
                yield SynthesisToken(trace_id=req.trace_id, seq=seq, text=line)
            yield self._finish(req, raw, "extractive", start)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
