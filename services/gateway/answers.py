"""``/v1/ask``, ``/v1/ask/stream`` and ``/v1/conversations/{id}``: one turn of a conversation.

A turn: an emergency is answered at once (no retrieval, no model); otherwise a follow-up is rewritten to
stand alone, retrieval runs on it with the chunks cited earlier in the conversation added, the
synthesizer answers (whole, or token by token relayed as server-sent events), and the turn is stored
with its citations, which keep their display numbers for the whole conversation.

The sources are listed strongest evidence first, equal evidence in retrieval order (each keeps its ``rank``:
``shared.models.strongest_evidence_first``); the answer's citations are numbered the same way
(``shared.citations.CitationVerifier``).

Before retrieval the question goes through the query-intelligence steps shared with ``/v1/query``
(:mod:`services.gateway.understanding`): it is classified, its language detected and, with an API key, a
question not in English is searched as its English translation and answered in the asker's language (the
request's ``language``, else the detected one); offline the rules classify and nothing is translated. The class
routes it: a drug-interaction question has the interaction check said first, a guideline question searches
guideline sources first (every source when none clears ``EVIDENTIA_RETRIEVAL_MIN_SCORE``). The response's
``query_intelligence`` reports each step. MeSH enhancement is not run here (only on ``/v1/query``).

Server-sent events of ``/v1/ask/stream``, in order: ``retrieval_done`` (the sources), ``token`` (``seq``
from 0, in order), ``citations`` (the verified answer, its citations and the reference list),
``summary`` (the evidence summary), ``metrics`` (time to first token..., ``tokens_used`` and ``llm_calls``),
``done`` (with ``tokens_used``); or ``error``. With a PubMed search at question time (the request's ``fetch``,
:mod:`services.gateway.livefetch`), ``fetch`` events come before ``retrieval_done`` as it runs (``stage``:
``searching``, ``found`` with ``found``, ``embedded`` with ``embedded`` of ``of``, ``unavailable``, ``done`` with
the ``report``); ``retrieval_done`` and the response carry the report as ``fetch``.

The search happens (``fetch`` decided by :func:`services.gateway.livefetch.plan.plan_fetch`): with ``always``
before retrieval; with ``auto`` after it, when fewer than three retrieved sources clear the relevance floor, and
retrieval runs again when new records became searchable within the budget.

Every Claude call made for a turn (the LLM reranker in the retriever; the follow-up rewrite, the answer,
summary and support check in the synthesizer) is in the answer's ``llm_calls`` with its model and tokens, and
``tokens_used`` adds them up. Offline (no API key) no call is made: ``llm_calls`` is empty and every count in
``tokens_used`` is 0 (``mode`` says ``extractive``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import HTTPException

from services.gateway.errors import sse_error
from services.gateway.intelligence.interactions import InteractionChecker
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.livefetch.interaction import interaction_fetch
from services.gateway.livefetch.labels import LabelFetcher
from services.gateway.livefetch.plan import STORE_ONLY, FetchPlan, should_search
from services.gateway.livefetch.query import question_concepts
from services.gateway.livefetch.runner import LiveFetcher, Progress, no_progress
from services.gateway.runtime import TurnLocks
from services.gateway.schemas import AskRequest, AskResponse
from services.gateway.schemas.common import FetchReport, InteractionOut, QueryIntelligence
from services.gateway.sse import error_event, sse
from services.gateway.store.conversations import (
    ConversationConflict,
    ConversationContext,
    ConversationGone,
    ConversationStore,
    TurnRecord,
    new_conversation_id,
)
from services.gateway.understanding.analysis import Analysis, QueryAnalyser, language_named
from services.gateway.understanding.classify import Classification
from services.gateway.understanding.enhance import Enhancement
from services.gateway.understanding.language import detect_language
from services.gateway.understanding.rewrite import FollowUpRewriter
from services.gateway.understanding.routing import (
    check_interaction,
    interaction_out,
    routed_search,
    with_interaction,
)
from shared import metrics
from shared.citations import StreamGate, gate_reply, scrub
from shared.events import (
    Citation,
    RetrievalReply,
    RetrievalRequest,
    SynthesisReply,
    SynthesisRequest,
    SynthesisToken,
    new_trace_id,
)
from shared.llm import UsageLedger, usage_scope
from shared.models import SearchFilters, SearchHit, strongest_evidence_first
from shared.safety import EmergencyVerdict, acheck_emergency, emergency_reply
from shared.settings import Settings

log = logging.getLogger(__name__)
MAX_QUERY = 10_000


class AnswerKafka(Protocol):
    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply: ...

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply: ...

    def synthesize_stream(self, request: SynthesisRequest) -> AsyncIterator[tuple[str, bytes]]: ...


@dataclass
class Turn:
    body: AskRequest
    owner: str | None
    ctx: ConversationContext
    number: int
    standalone: str
    trace_id: str
    start: float
    ledger: UsageLedger
    analysis: Analysis | None = None
    intelligence: QueryIntelligence | None = None
    interaction: InteractionOut | None = None
    plan: FetchPlan = STORE_ONLY
    fetch: FetchReport | None = None

    @property
    def searched(self) -> str:
        """What retrieval searches: the standalone question, translated when it could be."""
        return self.analysis.enhancement.search_query[:MAX_QUERY] if self.analysis else self.standalone

    @property
    def asked(self) -> str:
        """What the synthesizer answers: the standalone question in English when translated, and the answer's
        language when it is not English."""
        if self.analysis is None:
            return self.standalone
        return self.analysis.question_for_synthesis(self.analysis.enhancement.english_question)


class TokenOrder:
    """Releases streamed tokens strictly by ``seq`` (0, 1, 2...), holding any that arrive early."""

    def __init__(self) -> None:
        self.next = 0
        self.held: dict[int, SynthesisToken] = {}

    def push(self, token: SynthesisToken) -> list[SynthesisToken]:
        if token.seq < self.next:
            return []  # a duplicate
        self.held[token.seq] = token
        out = []
        while self.next in self.held:
            out.append(self.held.pop(self.next))
            self.next += 1
        return out

    def flush(self) -> list[SynthesisToken]:
        out = [self.held[k] for k in sorted(self.held)]
        self.held.clear()
        return out


class AnswerService:
    """One turn of a conversation, whole (:meth:`ask`) or streamed (:meth:`stream`). Built per request from
    the gateway's state (:func:`services.gateway.deps.get_answers`); ``locks`` are the process's."""

    def __init__(
        self,
        settings: Settings,
        kafka: AnswerKafka,
        store: ConversationStore,
        rewriter: FollowUpRewriter,
        locks: TurnLocks,
        analyser: QueryAnalyser | None = None,
        rxnav: RxNavClient | None = None,
        live: LiveFetcher | None = None,
        labels: LabelFetcher | None = None,
    ):
        self.settings = settings
        self.kafka = kafka
        self.store = store
        self.rewriter = rewriter
        self.locks = locks
        self.analyser = analyser
        self.rxnav = rxnav
        self.live = live
        self.labels = labels

    # --- one turn ---------------------------------------------------------------------------------

    async def context(self, body: AskRequest, owner: str | None) -> ConversationContext:
        """The conversation a turn continues (a new one without ``conversation_id``); 404 when the caller
        cannot see it."""
        g = self.settings.gateway
        if body.conversation_id is None:
            return ConversationContext(new_conversation_id())
        ctx = await self.store.context(body.conversation_id, owner, g.conversation_turns, g.max_cited_chunks)
        if ctx is None:
            raise HTTPException(404, f"no conversation {body.conversation_id}")
        return ctx

    async def _begin(self, body: AskRequest, owner: str | None, start: float, plan: FetchPlan = STORE_ONLY) -> Turn:
        ctx = await self.context(body, owner)  # again, under the conversation's lock: it may have moved on
        standalone = body.question.strip()
        ledger = UsageLedger()
        if ctx.turns and not (await acheck_emergency(body.question)).emergency:
            standalone = await self.rewriter.rewrite(body.question, ctx.history, ctx.last_question, ledger=ledger)
            # A rewritten question is model output shown to the client and searched: it may cite nothing.
            standalone = scrub(standalone, ())[0] or body.question.strip()
        turn = Turn(body, owner, ctx, ctx.turns + 1, standalone[:MAX_QUERY], new_trace_id(), start, ledger)
        turn.plan = plan
        return turn

    async def _understand(self, turn: Turn, verdict: EmergencyVerdict) -> float:
        """The query-intelligence steps (:mod:`services.gateway.understanding`) of the standalone question, their
        Claude calls added to the turn's; an emergency is reported as such, nothing else run. Returns the time
        taken (ms)."""
        t0 = time.perf_counter()
        b = turn.body
        if verdict.emergency:
            q = turn.standalone
            turn.analysis = Analysis(
                Classification("emergency", "guard", [verdict.reason]),
                detect_language(q),
                Enhancement(q, q, q, "none"),
                language_named(b.language) if b.language else None,
            )
            turn.intelligence = turn.analysis.intelligence()
            turn.intelligence.route.append("emergency: answered at once, no retrieval and no model")
        elif self.analyser is not None:
            with usage_scope() as used:
                turn.analysis = await self.analyser.analyse(turn.standalone, enhance=False, asker_language=b.language)
                turn.intelligence = turn.analysis.intelligence()
                if self.rxnav is not None:
                    checker = InteractionChecker(
                        self.rxnav,
                        self.kafka.retrieve,
                        trace_id=turn.trace_id,
                        passages=self.settings.workflow.interaction_passages,
                        min_score=self.settings.relevance_floor,
                        fetch=interaction_fetch(turn.plan, self.labels, self.live),
                    )
                    checked = await check_interaction(checker, turn.analysis, turn.standalone, turn.intelligence)
                    turn.interaction = interaction_out(checked) if checked is not None else None
            turn.ledger.extend(used.calls)
            if turn.interaction is not None:  # said before the answer, which only the verified passages may cite
                turn.interaction.text = scrub(turn.interaction.text, ())[0]
        return (time.perf_counter() - t0) * 1000

    async def _retrieve(self, turn: Turn, progress: Progress = no_progress) -> tuple[list[SearchHit], float]:
        """The passages of the turn, with PubMed searched first (``always``) or when the store has too little
        (``auto``); the fetch's time is in the report's ``waited_ms``, not in the returned retrieval time."""
        if turn.plan.mode == "always":
            await self._fetch(turn, "fetch: always", progress)
        t0 = time.perf_counter()
        fetch_ms = 0.0  # of a fetch between two retrievals, not counted as retrieval time
        hits = await self._search(turn)
        if turn.plan.mode != "always":
            english = turn.analysis.enhancement.english_question if turn.analysis else turn.standalone
            concepts = question_concepts(english)
            wanted, why = should_search(turn.plan.mode, hits, self.settings.relevance_floor, concepts)
            if wanted:
                fetch_ms = await self._fetch(turn, why, progress)
                if turn.fetch is not None and turn.fetch.ingested:
                    hits = await self._search(turn)
            else:
                turn.fetch = FetchReport(
                    mode=turn.plan.mode, requested=turn.plan.requested, reason=turn.plan.note or why
                )
        return hits, (time.perf_counter() - t0) * 1000 - fetch_ms

    async def _fetch(self, turn: Turn, why: str, progress: Progress) -> float:
        """The turn's PubMed fetch (its report in ``turn.fetch``); the time it took (ms)."""
        t0 = time.perf_counter()
        plan = turn.plan
        if self.live is None:
            turn.fetch = FetchReport(
                mode=plan.mode, requested=plan.requested, reason=f"{why}; this gateway has no PubMed fetch configured"
            )
            return 0.0
        english = turn.analysis.enhancement.english_question if turn.analysis else turn.standalone
        language = turn.analysis.language if turn.analysis else detect_language(turn.standalone)
        with usage_scope() as used:
            terms = await self.live.terms(turn.standalone, english, language)
        turn.ledger.extend(used.calls)
        turn.fetch = await self.live.run(terms, turn.trace_id, plan.mode, plan.requested, why, progress)
        await progress({"stage": "done", "report": turn.fetch.model_dump(mode="json")})
        return (time.perf_counter() - t0) * 1000

    async def _search(self, turn: Turn) -> list[SearchHit]:
        b = turn.body

        async def retrieve(filters: SearchFilters) -> RetrievalReply:
            found = await self.kafka.retrieve(
                RetrievalRequest(
                    trace_id=turn.trace_id,
                    query=turn.searched,
                    top_k=b.top_k,
                    top_n=b.top_n,
                    mode=b.mode,
                    filters=filters,
                    extra_chunk_ids=turn.ctx.cited_chunk_ids,
                )
            )
            turn.ledger.extend(found.llm_calls)
            return found

        if turn.analysis is not None and turn.intelligence is not None:
            hits = await routed_search(
                retrieve,
                turn.analysis.classification.category,
                b.filters,
                self.settings.relevance_floor,
                turn.intelligence,
            )
        else:
            hits = (await retrieve(b.filters)).hits
        return hits

    def _synthesis(self, turn: Turn, hits: list[SearchHit], stream: bool) -> SynthesisRequest:
        return SynthesisRequest(
            trace_id=turn.trace_id,
            question=turn.asked,
            passages=hits,
            stream=stream,
            history=turn.ctx.history,
            citation_numbers=turn.ctx.numbering,
            summarize=turn.body.summary,
        )

    @staticmethod
    def _emergency(turn: Turn, verdict: EmergencyVerdict) -> SynthesisReply:
        return emergency_reply(verdict, turn.trace_id)

    @staticmethod
    def _with_interaction(turn: Turn, reply: SynthesisReply) -> SynthesisReply:
        """The answer with the drug-interaction check said first (a drug-interaction question)."""
        if turn.interaction is None:
            return reply
        return reply.model_copy(
            update={
                "answer": with_interaction(reply.answer, turn.interaction),
                "numbered_answer": with_interaction(reply.numbered_answer or reply.answer, turn.interaction),
            }
        )

    @staticmethod
    def _answer_language(turn: Turn, reply: SynthesisReply) -> str | None:
        if turn.analysis is None:
            return None
        return turn.analysis.answer_language if reply.mode == "llm" else "en"

    @staticmethod
    def references(ctx: ConversationContext, reply: SynthesisReply) -> list[Citation]:
        refs = {c.citation_id: c for c in ctx.references}
        for c in reply.citations:
            refs.setdefault(c.citation_id, c)
        return sorted(refs.values(), key=lambda c: c.number)

    async def _save(self, turn: Turn, reply: SynthesisReply, hits: list[SearchHit], timings: dict[str, float]) -> None:
        verified = set(reply.citation_check.verified)
        chunks = list(dict.fromkeys(h.chunk_id for h in hits if h.citation_id in verified))
        await self.store.save_turn(
            turn.ctx.conversation_id,
            TurnRecord(
                owner=turn.owner,
                turn=turn.number,
                question=turn.body.question,
                standalone_question=turn.standalone,
                answer=reply.answer,
                display=reply.numbered_answer or reply.answer,
                mode=reply.mode,
                citations=reply.citations,
                cited_chunk_ids=chunks,
                citation_check=reply.citation_check,
                summary=reply.summary,
                timings_ms=timings,
            ),
        )

    def _response(
        self, turn: Turn, reply: SynthesisReply, hits: list[SearchHit], timings: dict[str, float]
    ) -> AskResponse:
        return AskResponse(
            question=turn.body.question,
            conversation_id=turn.ctx.conversation_id,
            turn=turn.number,
            standalone_question=turn.standalone,
            answer=reply.answer,
            numbered_answer=reply.numbered_answer or reply.answer,
            mode=reply.mode,
            model=reply.model,
            citations=reply.citations,
            references=self.references(turn.ctx, reply),
            citation_check=reply.citation_check,
            summary=reply.summary,
            agreement=reply.agreement,
            emergency=reply.emergency,
            disclaimer=reply.disclaimer,
            sources=strongest_evidence_first(hits) if turn.body.return_sources else [],
            timings_ms=timings,
            tokens_used=turn.ledger.total,
            llm_calls=turn.ledger.calls,
            query_intelligence=turn.intelligence,
            answer_language=self._answer_language(turn, reply),
            interaction=turn.interaction,
            fetch=turn.fetch,
        )

    # --- whole -------------------------------------------------------------------------------------------

    async def ask(self, body: AskRequest, owner: str | None, start: float, plan: FetchPlan = STORE_ONLY) -> AskResponse:
        """One turn answered whole and stored; 404 for an unknown conversation, 409 when another turn of it was
        stored meanwhile. ``plan``: the PubMed fetch the caller may have."""
        await self.context(body, owner)  # 404 before anything else
        async with self.locks.lock(body.conversation_id):
            turn = await self._begin(body, owner, start, plan)
            hits: list[SearchHit] = []
            timings: dict[str, float] = {}
            verdict = await acheck_emergency(body.question)
            timings["analysis"] = await self._understand(turn, verdict)
            if verdict.emergency:
                reply = self._emergency(turn, verdict)
            else:
                hits, timings["retrieval"] = await self._retrieve(turn)
                if turn.fetch is not None and turn.fetch.searched:
                    timings["fetch"] = turn.fetch.waited_ms
                t0 = time.perf_counter()
                reply = gate_reply(
                    await self.kafka.synthesize(self._synthesis(turn, hits, stream=False)),
                    {h.citation_id for h in hits},
                )
                turn.ledger.extend(reply.llm_calls)
                reply = self._with_interaction(turn, reply)
                timings["synthesis"] = (time.perf_counter() - t0) * 1000
            timings["total"] = (time.perf_counter() - start) * 1000
            try:
                await self._save(turn, reply, hits, timings)
            except ConversationConflict as exc:
                raise HTTPException(409, f"conversation changed meanwhile: {exc}") from exc
            except ConversationGone as exc:
                raise HTTPException(404, f"{exc} while this turn was answered; the turn was not stored") from exc
            return self._response(turn, reply, hits, timings)

    # --- streamed ----------------------------------------------------------------------------------------

    async def stream(
        self, body: AskRequest, owner: str | None, start: float, plan: FetchPlan = STORE_ONLY
    ) -> AsyncIterator[str]:
        """One turn as server-sent events (the module's list), stored when it completes; a failure after the
        stream started is an ``error`` event."""
        try:
            async with self.locks.lock(body.conversation_id):
                async for chunk in self._stream_turn(body, owner, start, plan):
                    yield chunk
        # The stream has started: an error event is the only way left to say so (services.gateway.sse).
        except ConversationConflict as exc:
            yield sse("error", sse_error(409, "ConversationConflict", str(exc)))
        except ConversationGone as exc:
            yield sse("error", sse_error(404, "ConversationGone", f"{exc}; the turn was not stored"))
        except Exception as exc:
            yield error_event(exc)

    async def _stream_turn(
        self, body: AskRequest, owner: str | None, start: float, plan: FetchPlan
    ) -> AsyncIterator[str]:
        turn = await self._begin(body, owner, start, plan)
        head = {
            "conversation_id": turn.ctx.conversation_id,
            "turn": turn.number,
            "standalone_question": turn.standalone,
        }
        timings: dict[str, float] = {}
        first: float | None = None
        hits: list[SearchHit] = []
        verdict = await acheck_emergency(body.question)
        timings["analysis"] = await self._understand(turn, verdict)

        def found() -> dict[str, Any]:  # as it stands when sent: retrieval adds the route it took
            return {
                "query_intelligence": turn.intelligence.model_dump(mode="json") if turn.intelligence else None,
                "interaction": turn.interaction.model_dump(mode="json") if turn.interaction else None,
            }

        if verdict.emergency:
            reply = self._emergency(turn, verdict)
            yield sse(
                "retrieval_done",
                {**head, **found(), "sources": [], "skipped": "emergency", "emergency_reason": verdict.reason},
            )
            first = time.perf_counter() - start
            yield sse("token", {"seq": 0, "text": reply.answer})
        else:
            events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            retrieving = asyncio.create_task(self._retrieve(turn, events.put))
            async for event in _relay(events, retrieving):
                yield sse("fetch", event)
            hits, timings["retrieval"] = retrieving.result()
            if turn.fetch is not None and turn.fetch.searched:
                timings["fetch"] = turn.fetch.waited_ms
            yield sse(
                "retrieval_done",
                {
                    **head,
                    **found(),
                    "fetch": turn.fetch.model_dump(mode="json") if turn.fetch else None,
                    "retrieval_ms": timings["retrieval"],
                    "count": len(hits),
                    "sources": [h.model_dump(mode="json") for h in strongest_evidence_first(hits)]
                    if body.return_sources
                    else [],
                },
            )
            order = TokenOrder()
            # The synthesizer gates its tokens; they are gated again here, against the passages this turn sent,
            # so no citation of another id reaches the client whatever the synthesizer's version.
            allowed = {h.citation_id for h in hits}
            gate = StreamGate(allowed)
            sent = 0
            if turn.interaction is not None:  # said first, as in the whole answer
                yield sse("token", {"seq": sent, "text": with_interaction("", turn.interaction)})
                sent += 1
            final: SynthesisReply | None = None
            async for kind, raw in self.kafka.synthesize_stream(self._synthesis(turn, hits, stream=True)):
                if kind == "SynthesisToken":
                    for token in order.push(SynthesisToken.model_validate_json(raw)):
                        text = gate.push(token.text)
                        if not text:
                            continue
                        if first is None:
                            first = time.perf_counter() - start
                            metrics.TIME_TO_FIRST_TOKEN.observe(first)
                        yield sse("token", {"seq": sent, "text": text})
                        sent += 1
                else:
                    final = SynthesisReply.model_validate_json(raw)
            if final is None or final.error is not None:
                gate.discard()  # held-back text was never checked whole: none of it is sent
                # A 5xx says an error id, never the synthesizer's exception text (logged with that id).
                err = (
                    sse_error(final.error.status or 500, final.error.type, final.error.message)
                    if final is not None and final.error
                    else sse_error(502, "NoReply", "the synthesizer sent no answer")
                )
                yield sse("error", err)
                return
            for token in order.flush():  # a gap never filled: send what there is, still in order
                text = gate.push(token.text)
                if text:
                    yield sse("token", {"seq": sent, "text": text})
                    sent += 1
            rest = gate.close()
            if rest:
                yield sse("token", {"seq": sent, "text": rest})
            reply = gate_reply(final, allowed)
            turn.ledger.extend(reply.llm_calls)
            reply = self._with_interaction(turn, reply)
            if reply.time_to_first_token_ms is not None:
                timings["synthesis_time_to_first_token"] = reply.time_to_first_token_ms
        timings["time_to_first_token"] = (first or 0.0) * 1000
        timings["total"] = (time.perf_counter() - start) * 1000
        await self._save(turn, reply, hits, timings)
        yield sse(
            "citations",
            {
                **head,
                "answer": reply.answer,
                "numbered_answer": reply.numbered_answer or reply.answer,
                "mode": reply.mode,
                "model": reply.model,
                "citations": [c.model_dump() for c in reply.citations],
                "references": [c.model_dump() for c in self.references(turn.ctx, reply)],
                "citation_check": reply.citation_check.model_dump(),
                "agreement": reply.agreement.model_dump() if reply.agreement else None,
                "emergency": reply.emergency.model_dump() if reply.emergency else None,
                "disclaimer": reply.disclaimer,
                "answer_language": self._answer_language(turn, reply),
                **found(),
            },
        )
        if reply.summary is not None:
            yield sse("summary", reply.summary.model_dump())
        yield sse(
            "metrics",
            {
                "retrieval_ms": timings.get("retrieval"),
                "time_to_first_token_ms": timings["time_to_first_token"],
                "synthesis_time_to_first_token_ms": timings.get("synthesis_time_to_first_token"),
                "total_ms": timings["total"],
                **_usage(turn.ledger),
            },
        )
        agreement = reply.agreement.counts.model_dump() if reply.agreement and reply.agreement.labels else None
        yield sse("done", {**head, "tokens_used": turn.ledger.total.model_dump(), "agreement": agreement})


async def _relay(events: asyncio.Queue[dict[str, Any]], task: asyncio.Task[Any]) -> AsyncIterator[dict[str, Any]]:
    """The progress ``events`` put while ``task`` runs, in order, until it has finished and none is left (the
    task's exception, if any, is raised by ``task.result()`` afterwards)."""
    try:
        while True:
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
                continue
            getter.cancel()
            while not events.empty():
                yield events.get_nowait()
            return
    finally:
        if not task.done():
            task.cancel()


def _usage(ledger: UsageLedger) -> dict[str, Any]:
    return {"tokens_used": ledger.total.model_dump(), "llm_calls": [c.model_dump() for c in ledger.calls]}
