"""The gateway app in-process (httpx ASGI transport) with fakes for Kafka and the conversation store, put in
through ``app.dependency_overrides`` (the providers of :mod:`services.gateway.deps`).

The synthesizer behind the fake Kafka is the real core (``services.synthesizer.core``), in LLM mode
against the fake Anthropic server (real SDK over HTTP) or offline, so a turn runs the same code as in
the running system except for the Kafka hop and PostgreSQL, which the integration tests cover.
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import anthropic
import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from services.gateway import deps
from services.gateway.app import create_app
from services.gateway.intelligence.cache import MemoryCache
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.livefetch.runner import SearchUnavailable
from services.gateway.schemas.conversations import ConversationView, MessageView
from services.gateway.store.conversations import ConversationContext, ConversationGone, TurnRecord
from services.gateway.understanding.rewrite import FollowUpRewriter
from services.synthesizer.core import Synthesizer
from services.synthesizer.llm import ClaudeAnswerer
from shared.db.jobs import JobStatus
from shared.events import (
    ChatTurn,
    Citation,
    ErrorInfo,
    RetrievalReply,
    RetrievalRequest,
    SynthesisReply,
    SynthesisRequest,
    SynthesisToken,
)
from shared.kafka.reply_client import RemoteError
from shared.models import SearchHit
from shared.settings import AskFetchSettings, GatewaySettings, LlmSettings, Settings
from tests.factories import search_hit
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.llm_steps import step_llm

hit = functools.partial(search_hit, title="Study {pmid} of screening", chunk_suffix="#h#0")

HITS = [
    hit("101", "Telephone counseling increased mammography screening among nonadherent women."),
    hit(
        "202",
        "Tailored print materials increased mammography screening rates modestly in older women.",
        2,
        study_type="cohort",
    ),
    hit("303", "Reminder letters alone did not change mammography screening rates in this population.", 3),
]


class FakeKafka:
    """Retrieval returns fixed hits; synthesis runs the real synthesizer core in-process."""

    def __init__(self, synth: Synthesizer, hits: list[SearchHit] | None = None, shuffle_tokens: bool = False):
        self.synth = synth
        self.hits = list(hits if hits is not None else HITS)
        self.shuffle_tokens = shuffle_tokens
        self.retrievals: list[RetrievalRequest] = []
        self.syntheses: list[SynthesisRequest] = []

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        self.retrievals.append(request)
        return RetrievalReply(hits=self.hits)

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        self.syntheses.append(request)
        try:
            return await self.synth.answer(request)
        except Exception as exc:  # as the handler + ReplyClient do: an error reply, raised as RemoteError
            raise RemoteError(ErrorInfo(type=type(exc).__name__, message=str(exc), status=502)) from exc

    async def synthesize_stream(self, request: SynthesisRequest) -> AsyncIterator[tuple[str, bytes]]:
        self.syntheses.append(request)
        events: list[SynthesisToken | SynthesisReply] = []
        try:
            async for e in self.synth.stream(request):
                events.append(e)
        except Exception as exc:  # as the handler does: the tokens so far, then an error reply
            events.append(SynthesisReply(error=ErrorInfo(type=type(exc).__name__, message=str(exc), status=502)))
        tokens, final = events[:-1], events[-1]
        if self.shuffle_tokens:  # as if the reply topic delivered them out of order
            random.Random(7).shuffle(tokens)
        for e in [*tokens, final]:
            yield type(e).__name__, e.model_dump_json().encode()


class FakePubmed:
    """PubMed at question time (:class:`services.gateway.livefetch.runner.PubmedSearch`) in memory: ``searches``
    {query: PMIDs}; an ingested PMID becomes ``embedded`` at once unless listed in ``slow``; ``down``: every
    search fails as an unreachable NCBI does. Records each call."""

    def __init__(
        self,
        searches: dict[str, list[str]] | None = None,
        *,
        stored: set[str] | None = None,
        slow: set[str] | None = None,
        down: bool = False,
    ):
        self.searches = searches or {}
        self.stored = set(stored or ())
        self.slow = set(slow or ())
        self.down = down
        self.queries: list[str] = []
        self.ingested: list[list[str]] = []
        self.stage: dict[str, str] = {}
        self.on_ingest: list[Callable[[list[str]], None]] = []
        self.label_jobs: list[list[str]] = []

    async def search_pubmed(self, term: str, max_ids: int, trace_id: str, timeout_s: float) -> tuple[int, list[str]]:
        self.queries.append(term)
        if self.down:
            raise SearchUnavailable(f"PubMed did not answer within {timeout_s:g} s")
        ids = self.searches.get(term, [])
        return len(ids), ids[:max_ids]

    async def unstored(self, document_ids: Sequence[str]) -> list[str]:
        return [d for d in document_ids if d not in self.stored and d not in self.stage]

    async def ingest_pmids(self, pmids: Sequence[str], trace_id: str) -> str:
        self.ingested.append(list(pmids))
        for p in pmids:
            self.stage[f"pubmed:{p}"] = "discovered" if p in self.slow else "embedded"
        for hook in self.on_ingest:
            hook(list(pmids))
        return f"job-{len(self.ingested)}"

    async def stages(self, document_ids: Sequence[str]) -> dict[str, str]:
        return {d: self.stage[d] for d in document_ids if d in self.stage}

    async def ingest_labels(self, drugs: Sequence[str], per_drug: int, trace_id: str) -> str:
        """An openFDA label job (the interaction check's): openFDA here has no label; the job ends at once."""
        self.label_jobs.append(list(drugs))
        return f"label-job-{len(self.label_jobs)}"

    async def job(self, job_id: str) -> JobStatus | None:
        return JobStatus(job_id=job_id, kind="query", state="done", total=0)


class MemoryStore:
    """The conversation store's contract, in memory (PostgreSQL's is exercised by the integration tests)."""

    def __init__(self) -> None:
        self.conversations: dict[str, dict[str, object]] = {}

    async def context(
        self, conversation_id: str, owner: str | None, max_turns: int, max_chunks: int
    ) -> ConversationContext | None:
        conv = self.conversations.get(conversation_id)
        if conv is None or (conv["owner"] is not None and conv["owner"] != owner):
            return None
        turns: list[TurnRecord] = conv["turns"]  # type: ignore[assignment]
        refs: dict[str, Citation] = conv["refs"]  # type: ignore[assignment]
        ctx = ConversationContext(
            conversation_id,
            len(turns),
            numbering={k: c.number for k, c in refs.items()},
            references=sorted(refs.values(), key=lambda c: c.number),
        )
        for t in turns[-max_turns:] if max_turns else []:
            ctx.history += [
                ChatTurn(role="user", content=t.question),
                ChatTurn(role="assistant", content=t.answer),
            ]
        if turns:
            ctx.last_question = turns[-1].standalone_question
        for t in reversed(turns):
            for c in t.cited_chunk_ids:
                if c not in ctx.cited_chunk_ids and len(ctx.cited_chunk_ids) < max_chunks:
                    ctx.cited_chunk_ids.append(c)
        return ctx

    async def save_turn(self, conversation_id: str, record: TurnRecord) -> None:
        if record.turn > 1 and conversation_id not in self.conversations:  # as PostgreSQL's row lock finds it
            raise ConversationGone(f"conversation {conversation_id} was deleted")
        conv = self.conversations.setdefault(conversation_id, {"owner": record.owner, "turns": [], "refs": {}})
        conv["turns"].append(record)  # type: ignore[attr-defined]
        for c in record.citations:
            conv["refs"].setdefault(c.citation_id, c)  # type: ignore[attr-defined]

    async def delete(self, conversation_id: str, owner: str | None, *, any_owner: bool = False) -> bool:
        conv = self.conversations.get(conversation_id)
        if conv is None or (conv["owner"] != owner and not any_owner):
            return False
        del self.conversations[conversation_id]
        return True

    async def view(self, conversation_id: str, owner: str | None) -> ConversationView | None:
        ctx = await self.context(conversation_id, owner, 0, 0)
        if ctx is None:
            return None
        turns: list[TurnRecord] = self.conversations[conversation_id]["turns"]  # type: ignore[assignment]
        messages: list[MessageView] = []
        for t in turns:
            messages.append(
                MessageView(turn=t.turn, role="user", content=t.question, standalone_question=t.standalone_question)
            )
            messages.append(
                MessageView(
                    turn=t.turn,
                    role="assistant",
                    content=t.display,
                    answer_with_ids=t.answer,
                    mode=t.mode,
                    citations=t.citations,
                )
            )
        from datetime import UTC, datetime

        now = datetime.now(UTC)
        return ConversationView(
            conversation_id=conversation_id,
            title=turns[0].question,
            created_at=now,
            updated_at=now,
            messages=messages,
            references=ctx.references,
        )


@pytest.fixture(scope="module")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(token_delay_s=0.0) as fake:
        yield fake


def llm_settings(fake: FakeAnthropic) -> LlmSettings:
    return LlmSettings(
        anthropic_api_key=SecretStr("test-key"),
        anthropic_base_url=fake.url,  # type: ignore[call-arg]
        model="claude-test",
    )


def build_app(
    *,
    fake: FakeAnthropic | None = None,
    gateway: GatewaySettings | None = None,
    hits: list[SearchHit] | None = None,
    shuffle: bool = False,
    claude_rewrites: bool = False,
    claude_intelligence: bool = False,
    pubmed: FakePubmed | None = None,
) -> tuple[FastAPI, FakeKafka, MemoryStore]:
    """The app over the fakes. ``claude_intelligence``: the query-intelligence steps (classification,
    translation) run by the synthesizer's step runner in-process against ``fake`` (a
    :class:`~tests.fakes.workflow_anthropic.WorkflowAnthropic` knows their tools); otherwise they are offline."""
    # Questions that name no ``fetch`` search PubMed (``auto``) only where the test gives a PubMed to search:
    # the others' fixed hits are the store, whatever ``auto`` would make of them.
    fetch = AskFetchSettings(default="auto" if pubmed is not None else "never")  # type: ignore[call-arg]
    settings = Settings(gateway=gateway or GatewaySettings(), ask_fetch=fetch)  # type: ignore[call-arg]
    app = create_app(settings)
    if fake is not None:
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake.url, max_retries=0)
        synth = Synthesizer(settings, ClaudeAnswerer(llm_settings(fake), client))
    else:
        synth = Synthesizer(settings)
    kafka = FakeKafka(synth, hits, shuffle)
    store = MemoryStore()
    if claude_rewrites and fake is not None:
        rewriter = FollowUpRewriter(  # the synthesizer's rewrite step, in-process
            step_llm(llm_settings(fake), anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0))
        )
    else:
        rewriter = FollowUpRewriter(step_llm(LlmSettings()))  # type: ignore[call-arg]
    app.dependency_overrides[deps.get_kafka] = lambda: kafka
    app.dependency_overrides[deps.get_conversation_store] = lambda: store
    app.dependency_overrides[deps.get_rewriter] = lambda: rewriter
    cache = MemoryCache()  # the query intelligence's cache (PostgreSQL's is exercised by the integration tests)
    app.dependency_overrides[deps.get_workflow_cache] = lambda: cache
    steps = (
        step_llm(llm_settings(fake), anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0))
        if claude_intelligence and fake is not None
        else step_llm(LlmSettings())  # type: ignore[call-arg]
    )
    rxnav = RxNavClient(None)  # no interaction service configured: the check says so
    app.dependency_overrides[deps.get_workflow_llm] = lambda: steps
    app.dependency_overrides[deps.get_rxnav] = lambda: rxnav
    search = pubmed or FakePubmed()  # PubMed at question time: finds nothing unless a test gives records
    app.dependency_overrides[deps.get_pubmed_search] = lambda: search
    app.dependency_overrides[deps.get_label_ingest] = lambda: search
    return app, kafka, store


def client(app: FastAPI, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway", headers=headers, timeout=30
    )
