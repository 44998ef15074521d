"""The synthesizer's core: question + passages -> a verified, cited answer and evidence summary. No Kafka.

Order of checks: an emergency is answered at once (no model call); passages below the relevance threshold
are dropped and, if none is left, the answer says the evidence is insufficient; otherwise Claude (or the
extractive answerer offline) writes the answer, whose citations are then verified against the passages and
numbered conversation-wide. The evidence summary is produced alongside (concurrently in LLM mode).
Every Claude call made for a request (answer, summary, support check) is recorded in the request's ledger
and sent back in the reply's ``llm_calls``, with its model and tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

from services.synthesizer.agreement import FAILED, OFFLINE, SINGLE, checked_agreement, disagreement_note, unlabelled
from services.synthesizer.extractive import ExtractiveAnswerer
from services.synthesizer.llm import ClaudeAnswerer
from services.synthesizer.spans import citation_spans
from services.synthesizer.summary import check_summary, extractive_summary, insufficient_summary
from services.synthesizer.support import ClaimChecker
from shared.citations import INSUFFICIENT, CitationVerifier, StreamGate, gate_summary, merge_check
from shared.events import (
    Agreement,
    Citation,
    CitationCheck,
    EvidenceSummary,
    SynthesisReply,
    SynthesisRequest,
    SynthesisToken,
)
from shared.llm import UsageLedger
from shared.models import SearchHit, relevant_hits
from shared.safety import DISCLAIMER, EmergencyGuard, default_guard, emergency_reply
from shared.settings import Settings

log = logging.getLogger(__name__)


class Synthesizer:
    def __init__(
        self,
        settings: Settings,
        llm: ClaudeAnswerer | None = None,
        guard: EmergencyGuard | None = None,
        claims: ClaimChecker | None = None,
    ):
        self.settings = settings
        self.llm = llm
        self.extractive = ExtractiveAnswerer()
        self.guard = guard or default_guard()
        self.claims = claims or ClaimChecker(settings, judge=llm)

    @classmethod
    def from_settings(cls, settings: Settings) -> Synthesizer:
        """A synthesizer that answers with Claude when an API key is set, else extractively."""
        llm = ClaudeAnswerer(settings.llm, support=settings.support) if settings.llm.anthropic_api_key else None
        return cls(settings, llm)

    @property
    def mode(self) -> str:
        return "llm" if self.llm is not None else "extractive"

    def relevant(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """Passages worth citing: those that clear the relevance threshold (:func:`shared.models.relevant_hits`)."""
        return relevant_hits(hits, self.settings.relevance_floor)

    def citable(self, req: SynthesisRequest) -> list[SearchHit]:
        """What the answer may cite: the relevant passages, or for a draft every passage given (its writer saw
        and chose from them all; what it cites is checked, not what it might have written from)."""
        return list(req.passages) if req.draft is not None else self.relevant(req.passages)

    async def _early(self, req: SynthesisRequest, start: float) -> SynthesisReply | None:
        verdict = await self.guard.acheck(req.question)  # an emergency never reaches the model, whoever asks
        if verdict.emergency:
            return emergency_reply(verdict, req.trace_id, _ms(start))
        if not self.relevant(req.passages):
            return self._insufficient(req, start, CitationCheck())
        return None

    def _insufficient(self, req: SynthesisRequest, start: float, check: CitationCheck) -> SynthesisReply:
        return SynthesisReply(
            trace_id=req.trace_id,
            answer=INSUFFICIENT,
            numbered_answer=INSUFFICIENT,
            mode="insufficient-evidence",
            disclaimer=DISCLAIMER,
            citation_check=check,
            took_ms=_ms(start),
            summary=insufficient_summary(self.mode) if req.summarize else None,
        )

    def _summary_task(
        self, req: SynthesisRequest, hits: list[SearchHit], ledger: UsageLedger
    ) -> asyncio.Task[dict[str, object] | None]:
        assert self.llm is not None

        async def run() -> dict[str, object] | None:
            try:
                return await self.llm.summary(req.question, hits, ledger=ledger)  # type: ignore[union-attr]
            except Exception:
                log.exception("evidence summary failed; falling back to the extractive one")
                return None

        return asyncio.create_task(run())

    async def _finish(
        self,
        req: SynthesisRequest,
        raw: str,
        mode: str,
        start: float,
        summary_task: asyncio.Task[dict[str, object] | None] | None = None,
        ttft_ms: float | None = None,
        ledger: UsageLedger | None = None,
    ) -> SynthesisReply:
        """The verified reply; ``llm_calls``: every call in ``ledger`` (the answer's, whatever the outcome)."""
        reply = await self._verified(req, raw, mode, start, summary_task, ttft_ms, ledger)
        return reply.model_copy(update={"llm_calls": list(ledger.calls)}) if ledger is not None else reply

    async def _verified(
        self,
        req: SynthesisRequest,
        raw: str,
        mode: str,
        start: float,
        summary_task: asyncio.Task[dict[str, object] | None] | None,
        ttft_ms: float | None,
        ledger: UsageLedger | None,
    ) -> SynthesisReply:
        hits = self.citable(req)
        verified = CitationVerifier(hits, req.citation_numbers).verify(raw)
        numbered = CitationVerifier(hits, req.citation_numbers).verify(raw, renumber=True)
        if not verified.citations:
            if summary_task is not None:
                # The summary request is already sent (and paid for): let it finish rather than leave it
                # running after the reply, so no model call outlives the answer it belongs to.
                await summary_task
            return self._insufficient(req, start, verified.check)
        summary: EvidenceSummary | None = None
        support, agreement = await asyncio.gather(
            self.claims.check(verified.text, hits, ledger=ledger),
            self._agreement(req, verified.text, verified.citations, hits, mode, ledger),
        )
        check = verified.check.model_copy(
            update={
                "unsupported": support.unsupported,
                "support_method": support.method,
                "claims_checked": support.checked,
            }
        )
        citations = await citation_spans(
            verified.text, verified.citations, hits, support, self.claims, datetime.now(UTC)
        )
        if req.summarize:
            checked = None
            if summary_task is not None:
                data = await summary_task
                checked = check_summary(data, hits, "llm") if data is not None else None
                if checked is not None:
                    check = merge_check(check, checked.removed)
            if checked is not None:
                summary = checked.summary
            else:  # offline, or Claude gave no valid summary: build it from the sources the answer cites
                cited = set(verified.check.verified)
                chosen = [
                    (s.text, s.hit) for s in self.extractive.select(req.question, hits) if s.hit.citation_id in cited
                ]
                summary, gone = gate_summary(
                    extractive_summary(
                        chosen or [(c.title, _hit_for(hits, c.citation_id)) for c in verified.citations]
                    ),
                    {h.citation_id for h in hits},
                )
                check = merge_check(check, gone)
        answer, numbered_answer = verified.text, numbered.text
        note = disagreement_note(agreement)
        if note is not None:  # said plainly, after the answer (the spans' places in it stay as they are)
            answer, numbered_answer = f"{answer}\n\n{note[0]}", f"{numbered_answer}\n\n{note[1]}"
        return SynthesisReply(
            trace_id=req.trace_id,
            answer=answer,
            numbered_answer=numbered_answer,
            mode=mode,  # type: ignore[arg-type]
            model=self.llm.model if mode == "llm" and self.llm else None,
            citations=citations,
            citation_check=check,
            disclaimer=DISCLAIMER,
            summary=summary,
            took_ms=_ms(start),
            time_to_first_token_ms=ttft_ms,
            agreement=agreement,
        )

    async def _agreement(
        self,
        req: SynthesisRequest,
        answer: str,
        citations: Sequence[Citation],
        hits: Sequence[SearchHit],
        mode: str,
        ledger: UsageLedger | None,
    ) -> Agreement:
        """The cited sources labelled against the answer's main finding (:mod:`services.synthesizer.agreement`):
        by Claude for an LLM answer citing two or more; otherwise, or when the call fails, no label and why."""
        if mode != "llm" or self.llm is None:
            return unlabelled("offline", OFFLINE)
        if len(citations) < 2:
            return unlabelled("single-source", SINGLE)
        cited = {c.citation_id for c in citations}
        passages = [h for h in hits if h.citation_id in cited]
        try:
            data = await self.llm.agreement(req.question, answer, passages, ledger=ledger)
        except Exception:
            log.exception("source agreement labelling failed; the answer goes without labels")
            return unlabelled("failed", FAILED).model_copy(update={"model": self.llm.model})
        return checked_agreement(data, citations, self.llm.model)

    async def answer(self, req: SynthesisRequest) -> SynthesisReply:
        """The whole reply to a synthesis request: the answer with its citations checked and their support
        scored, and (when asked) the structured summary. An emergency question gets the emergency reply and
        passages below the relevance threshold the insufficient-evidence reply, without a model call. A request
        with a ``draft`` has that answer checked (:meth:`citable`) instead of one composed."""
        start = time.perf_counter()
        if req.draft is not None:  # written already (its question guarded by its writer): checked, not composed
            return await self._finish(req, req.draft, "llm", start, ledger=UsageLedger())
        early = await self._early(req, start)
        if early is not None:
            return early
        hits = self.relevant(req.passages)
        if self.llm is not None:
            ledger = UsageLedger()
            task = self._summary_task(req, hits, ledger) if req.summarize else None
            try:
                raw = await self.llm.answer(req.question, hits, req.history, ledger=ledger)
            except BaseException:
                await _cancel(task)
                raise
            return await self._finish(req, raw, "llm", start, task, ledger=ledger)
        return await self._finish(req, self.extractive.answer(req.question, hits), "extractive", start)

    async def stream(self, req: SynthesisRequest) -> AsyncIterator[SynthesisToken | SynthesisReply]:
        """Token events numbered from 0 in order, then the final verified reply.

        The allowed ids (the relevant passages') are known before generation, so every token passes the
        citation gate as it streams: a citation of any other id never leaves, and only an open bracket (or the
        last word) is held back until it is whole. The final reply's ``citation_check`` reports what was removed.
        """
        if req.draft is not None:  # nothing to generate: the checked draft in one piece
            reply = await self.answer(req)
            yield SynthesisToken(trace_id=req.trace_id, seq=0, text=reply.answer)
            yield reply
            return
        start = time.perf_counter()
        early = await self._early(req, start)
        if early is not None:
            yield SynthesisToken(trace_id=req.trace_id, seq=0, text=early.answer)
            yield early.model_copy(update={"time_to_first_token_ms": early.took_ms})
            return
        hits = self.relevant(req.passages)
        gate = StreamGate({h.citation_id for h in hits})
        parts: list[str] = []
        ttft: float | None = None
        seq = 0
        if self.llm is not None:
            ledger = UsageLedger()
            task = self._summary_task(req, hits, ledger) if req.summarize else None
            try:
                async for text in self.llm.stream(req.question, hits, req.history, ledger=ledger):
                    parts.append(text)
                    safe = gate.push(text)
                    if not safe:
                        continue
                    if ttft is None:
                        ttft = _ms(start)
                    yield SynthesisToken(trace_id=req.trace_id, seq=seq, text=safe)
                    seq += 1
            except BaseException:
                gate.discard()  # what is held back was never checked: none of it leaves
                await _cancel(task)
                raise
            rest = gate.close()
            if rest:
                yield SynthesisToken(trace_id=req.trace_id, seq=seq, text=rest)
                seq += 1
            reply = await self._finish(req, "".join(parts), "llm", start, task, ttft, ledger)
            note = disagreement_note(reply.agreement) if reply.agreement is not None else None
            if note is not None and reply.mode == "llm":  # the closing sentence the whole answer ends with
                yield SynthesisToken(trace_id=req.trace_id, seq=seq, text=f"\n\n{note[0]}")
            yield reply
        else:
            raw = self.extractive.answer(req.question, hits)
            for line in [*raw.splitlines(keepends=True), None]:
                safe = gate.close() if line is None else gate.push(line)
                if not safe:
                    continue
                if ttft is None:
                    ttft = _ms(start)
                yield SynthesisToken(trace_id=req.trace_id, seq=seq, text=safe)
                seq += 1
            yield await self._finish(req, raw, "extractive", start, None, ttft)


async def _cancel(task: asyncio.Task[dict[str, object] | None] | None) -> None:
    """Cancel a background summary call and wait until it has stopped (none outlives its request)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


def _hit_for(hits: Sequence[SearchHit], citation_id: str) -> SearchHit:
    return next(h for h in hits if h.citation_id == citation_id)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
