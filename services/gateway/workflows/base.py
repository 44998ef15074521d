"""The base every workflow slice stands on.

- :class:`WorkflowContext`: what a workflow works with (settings, the backend, the cache, the LLM steps, the
  interaction service), given to a route by the FastAPI dependency :data:`ContextDep` (built from the
  providers of :mod:`services.gateway.deps`, which tests override);
- :class:`Workflow`: a workflow's service, built on a context; its ``run`` answers one request;
- :class:`Run`: one run's steps and timings as it goes: each step is reported to ``progress`` when it starts
  and ends (the stream's ``step`` events), each timing kept under its name in ``timings_ms``;
- :func:`metered`: the answer with what it cost (``tokens_used``, ``llm_calls``): the Claude calls made here and
  those the retriever and synthesizer made for it, which come back in their replies;
- :func:`progress_events`: a run as server-sent events, ``step`` per step, then ``result`` (or ``error``);
- :func:`workflow_router`: the router a slice declares its routes on (tag ``workflows``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from fastapi import APIRouter, Depends

from services.gateway.deps import (
    ScopesDep,
    SettingsDep,
    get_label_ingest,
    get_pubmed_search,
    get_rxnav,
    get_workflow_backend,
    get_workflow_cache,
    get_workflow_llm,
)
from services.gateway.intelligence.cache import Cache
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.livefetch.interaction import InteractionFetch, interaction_fetch
from services.gateway.livefetch.labels import LabelFetcher, LabelIngest
from services.gateway.livefetch.plan import plan_for
from services.gateway.livefetch.runner import LiveFetcher, PubmedSearch
from services.gateway.schemas.common import FetchMode, Metered, WorkflowStep
from services.gateway.sse import error_event, sse
from services.gateway.workflows.backend import MeteredBackend, WorkflowBackend
from shared.llm import usage_scope
from shared.settings import Settings

Progress = Callable[[WorkflowStep], Awaitable[None]]


async def no_progress(step: WorkflowStep) -> None:
    return None


def ms(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.perf_counter()``), to 0.1 ms."""
    return round((time.perf_counter() - start) * 1000, 1)


class WorkflowContext:
    """What a workflow works with. The backend is wrapped in a :class:`MeteredBackend` (its replies' Claude
    calls go to the current answer's ledger)."""

    def __init__(
        self,
        settings: Settings,
        backend: WorkflowBackend,
        cache: Cache,
        llm: WorkflowLlm | None = None,
        rxnav: RxNavClient | None = None,
        fetch: InteractionFetch | None = None,
        fetch_for: Callable[[FetchMode | None], InteractionFetch | None] | None = None,
    ):
        self.settings = settings
        self.fetch = fetch
        """What the drug interaction check may fetch at question time for this caller (None: the store only)."""
        self.fetch_for = fetch_for
        """The interaction check's fetch for a mode the request names, under this caller's scopes."""
        self.backend = backend  # the setter wraps it (MeteredBackend)
        self.cache = cache
        self.llm = llm or WorkflowLlm(settings.llm)
        w = settings.workflow
        self.rxnav = rxnav or RxNavClient(w.rxnav_url, timeout_s=w.rxnav_timeout_s)

    def request_fetch(self, requested: FetchMode | None) -> None:
        """Let the interaction check fetch as the request asks (``fetch`` on ``/v1/query``; None: the deployment's
        default); 403 for ``always`` from a key without the ``ingest`` scope."""
        if requested is not None and self.fetch_for is not None:
            self.fetch = self.fetch_for(requested)

    @property
    def backend(self) -> WorkflowBackend:
        return self._backend

    @backend.setter
    def backend(self, backend: WorkflowBackend) -> None:
        self._backend = backend if isinstance(backend, MeteredBackend) else MeteredBackend(backend)


async def get_context(
    settings: SettingsDep,
    backend: Annotated[WorkflowBackend, Depends(get_workflow_backend)],
    cache: Annotated[Cache, Depends(get_workflow_cache)],
    llm: Annotated[WorkflowLlm, Depends(get_workflow_llm)],
    rxnav: Annotated[RxNavClient, Depends(get_rxnav)],
    scopes: ScopesDep,
    pubmed: Annotated[PubmedSearch, Depends(get_pubmed_search)],
    label_ingest: Annotated[LabelIngest, Depends(get_label_ingest)],
) -> WorkflowContext:
    """The context of one request; the interaction check may fetch under ``/v1/ask``'s rule with the mode a
    question that names none gets (:func:`services.gateway.livefetch.plan.plan_fetch`: the deployment's
    ``EVIDENTIA_ASK_FETCH_DEFAULT`` for a key with ``ingest``, else ``never``), or the one the request names
    (:meth:`WorkflowContext.request_fetch`)."""
    labels = LabelFetcher(label_ingest, settings.ask_fetch.label_wait_s)
    live = LiveFetcher(pubmed, settings, cache, llm)

    def fetch_for(requested: FetchMode | None) -> InteractionFetch | None:
        return interaction_fetch(plan_for(requested, scopes, settings.ask_fetch.default), labels, live)

    return WorkflowContext(settings, backend, cache, llm, rxnav, fetch_for(None), fetch_for)


ContextDep = Annotated[WorkflowContext, Depends(get_context)]


class Workflow:
    """A workflow's service on a context (subclasses add ``run``: one request answered)."""

    def __init__(self, ctx: WorkflowContext):
        self.ctx = ctx

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def backend(self) -> WorkflowBackend:
        return self.ctx.backend

    @property
    def llm(self) -> WorkflowLlm:
        return self.ctx.llm


class Run:
    """One run of a workflow: its steps as they run and its timings (ms), from when it was made."""

    def __init__(self, progress: Progress = no_progress):
        self.started = time.perf_counter()
        self.progress = progress
        self.steps: list[WorkflowStep] = []
        self.timings: dict[str, float] = {}

    def lap(self, name: str, t0: float) -> None:
        """The time since ``t0`` kept as ``name``."""
        self.timings[name] = ms(t0)

    def total(self) -> dict[str, float]:
        """The timings with ``total``, the time since the run began."""
        self.timings["total"] = ms(self.started)
        return self.timings

    async def start(self, name: str, detail: str) -> float:
        """A step begins: reported as running. Returns when it began (for :meth:`end`)."""
        t0 = time.perf_counter()
        await self.progress(WorkflowStep(name=name, status="running", detail=detail))
        return t0

    async def end(self, name: str, status: str, detail: str, t0: float, **data: Any) -> None:
        """A step ended with ``status`` (done, skipped or failed): kept, timed and reported."""
        step = WorkflowStep(name=name, status=status, detail=detail, data=data, ms=ms(t0))  # type: ignore[arg-type]
        self.steps.append(step)
        self.timings[name] = step.ms or 0.0
        await self.progress(step)


P = ParamSpec("P")
M = TypeVar("M", bound=Metered)


def metered(fn: Callable[P, Awaitable[M]]) -> Callable[P, Awaitable[M]]:
    """The workflow's answer with ``tokens_used`` and ``llm_calls``: every Claude call made while it ran."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> M:
        with usage_scope() as ledger:
            result = await fn(*args, **kwargs)
        return result.model_copy(update={"tokens_used": ledger.total, "llm_calls": ledger.calls})

    return run


async def progress_events(run: Callable[[Progress], Awaitable[Metered]]) -> AsyncIterator[str]:
    """A run as server-sent events: ``step`` per step as it runs, then ``result`` (or ``error``)."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def progress(step: WorkflowStep) -> None:
        await queue.put(sse("step", step.model_dump()))

    async def produce() -> None:
        try:
            result = await run(progress)
            await queue.put(sse("result", result.model_dump(mode="json")))
        except Exception as exc:  # the stream has started: an error event is the only way left
            await queue.put(error_event(exc))
        finally:
            await queue.put(None)

    task = asyncio.create_task(produce())
    try:
        while (item := await queue.get()) is not None:
            yield item
    finally:
        if not task.done():
            task.cancel()


def workflow_router() -> APIRouter:
    """The router a workflow slice declares its routes on."""
    return APIRouter(tags=["workflows"])
