"""The gateway's state as FastAPI dependencies: the one place routes get what they work with.

Each provider reads the running :class:`~services.gateway.runtime.Gateway` (``app.state.gateway``, built
by :func:`services.gateway.app.create_app`) or builds a per-request object from other providers. Tests
replace any of them with ``app.dependency_overrides[provider] = ...`` (a fake Kafka client, an in-memory
conversation store, a fake workflow backend) instead of reaching into the app's internals.
"""

from __future__ import annotations

from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from services.gateway.answers import AnswerKafka, AnswerService
from services.gateway.intelligence.cache import Cache
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.kafka import GatewayKafka
from services.gateway.livefetch.labels import LabelFetcher, LabelIngest
from services.gateway.livefetch.runner import LiveFetcher, PubmedSearch
from services.gateway.runtime import Gateway, TurnLocks
from services.gateway.store.cache import PgCache
from services.gateway.store.consultations import ConsultationStore, PgConsultationStore
from services.gateway.store.conversations import ConversationStore, PgConversationStore
from services.gateway.understanding.analysis import QueryAnalyser
from services.gateway.understanding.rewrite import FollowUpRewriter
from services.gateway.workflows.backend import WorkflowBackend
from shared.settings import Settings


async def get_gateway(request: Request) -> Gateway:
    """The running gateway: its Kafka client, its pool and the clients that outlive a request."""
    gateway: Gateway = request.app.state.gateway
    return gateway


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


async def get_settings(gateway: GatewayDep) -> Settings:
    return gateway.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_kafka(gateway: GatewayDep) -> GatewayKafka:
    """The gateway's Kafka client: publishing, and request/reply with the retriever and synthesizer."""
    return gateway.kafka


KafkaDep = Annotated[GatewayKafka, Depends(get_kafka)]


async def get_pool(gateway: GatewayDep) -> asyncpg.Pool:
    """The gateway's PostgreSQL pool (the gateway is started: its lifespan opened the pool)."""
    return gateway.pool


PoolDep = Annotated[asyncpg.Pool, Depends(get_pool)]


async def get_owner(request: Request) -> str | None:
    """The API key a request came with (its id), which owns the conversations it starts; None with
    authentication off."""
    value = getattr(request.state, "api_key_id", None)
    return value if isinstance(value, str) else None


OwnerDep = Annotated[str | None, Depends(get_owner)]


async def get_scopes(request: Request) -> frozenset[str]:
    """The scopes the request's API key carries (every scope with authentication off), as the API guard
    (:mod:`services.gateway.security`) granted them."""
    granted: frozenset[str] = request.scope.get("state", {}).get("api_scopes", frozenset())
    return granted


ScopesDep = Annotated[frozenset[str], Depends(get_scopes)]


async def get_deletes_any_owner(owner: OwnerDep, scopes: ScopesDep) -> bool:
    """Whether the caller may delete another key's stored conversation or consultation: a key with the ``admin``
    scope. With authentication off (no owner) the admin scope every caller holds does not reach other keys'
    rows."""
    return owner is not None and "admin" in scopes


DeletesAnyOwnerDep = Annotated[bool, Depends(get_deletes_any_owner)]


async def get_conversation_store(pool: PoolDep) -> ConversationStore:
    return PgConversationStore(pool)


ConversationStoreDep = Annotated[ConversationStore, Depends(get_conversation_store)]


async def get_consultation_store(pool: PoolDep) -> ConsultationStore:
    """The stored guideline consultations (``/v1/guidelines/consult`` with ``consultation_id``)."""
    return PgConsultationStore(pool)


ConsultationStoreDep = Annotated[ConsultationStore, Depends(get_consultation_store)]


async def get_answer_kafka(kafka: KafkaDep) -> AnswerKafka:
    """What answering needs of Kafka (retrieval and synthesis)."""
    return kafka


async def get_rewriter(gateway: GatewayDep) -> FollowUpRewriter:
    return gateway.rewriter


async def get_turn_locks(gateway: GatewayDep) -> TurnLocks:
    return gateway.turn_locks


async def get_workflow_backend(gateway: GatewayDep) -> WorkflowBackend:
    """Retrieval, synthesis, PubMed counts, ingestion jobs and MeSH headings for the workflows."""
    return gateway.workflow_backend


async def get_pubmed_search(gateway: GatewayDep) -> PubmedSearch:
    """PubMed's best matches, unstored documents, PMID ingestion and stages for ``/v1/ask``'s live fetch."""
    return gateway.workflow_backend


async def get_label_ingest(gateway: GatewayDep) -> LabelIngest:
    """FDA label ingestion jobs and job states for the drug interaction check's question-time fetch."""
    return gateway.workflow_backend


async def get_workflow_cache(pool: PoolDep) -> Cache:
    return PgCache(pool)


async def get_workflow_llm(gateway: GatewayDep) -> WorkflowLlm:
    return gateway.workflow_llm


async def get_rxnav(gateway: GatewayDep) -> RxNavClient:
    return gateway.rxnav


async def get_answers(
    settings: SettingsDep,
    kafka: Annotated[AnswerKafka, Depends(get_answer_kafka)],
    store: ConversationStoreDep,
    rewriter: Annotated[FollowUpRewriter, Depends(get_rewriter)],
    locks: Annotated[TurnLocks, Depends(get_turn_locks)],
    cache: Annotated[Cache, Depends(get_workflow_cache)],
    llm: Annotated[WorkflowLlm, Depends(get_workflow_llm)],
    rxnav: Annotated[RxNavClient, Depends(get_rxnav)],
    pubmed: Annotated[PubmedSearch, Depends(get_pubmed_search)],
    label_ingest: Annotated[LabelIngest, Depends(get_label_ingest)],
) -> AnswerService:
    """One turn's service, with the query intelligence shared with ``/v1/query`` (the workflows' LLM steps,
    cache and interaction service) and PubMed (and, for the interaction check, openFDA's labels) searched at
    question time through the workflows' backend."""
    analyser = QueryAnalyser(llm, cache, ttl_s=settings.workflow.cache_ttl_s)
    live = LiveFetcher(pubmed, settings, cache, llm)
    labels = LabelFetcher(label_ingest, settings.ask_fetch.label_wait_s)
    return AnswerService(settings, kafka, store, rewriter, locks, analyser, rxnav, live, labels)


AnswersDep = Annotated[AnswerService, Depends(get_answers)]
