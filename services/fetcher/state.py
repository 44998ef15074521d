"""What the fetcher holds while it runs: the database pool, the NCBI clients and the sources built on them.

The routers read it through FastStream's context (:data:`StateDep`), set once when the service is wired
(:func:`services.fetcher.routers.register`).
"""

from __future__ import annotations

from typing import Annotated

import asyncpg

from services.fetcher.bookshelf import BookshelfClient
from services.fetcher.clinicaltrials import ClinicalTrialsClient
from services.fetcher.eutils import EutilsClient
from services.fetcher.jobs import fail_jobs_hook
from services.fetcher.openfda import OpenFdaClient
from services.fetcher.ratelimit import CLUSTER_SAFETY, Limiter, PgTokenBucket, TokenBucket, make_limiter, rate_for
from services.fetcher.sources import FetcherSources
from services.fetcher.sources.clinicaltrials import ClinicalTrialsSource
from services.fetcher.sources.fdalabel import FdaLabelSource
from shared.db import create_pool, reachable
from shared.db.jobs import fail_documents_hook
from shared.kafka.context import LoopContext
from shared.kafka.dead_letters import add_dead_letter_hook
from shared.settings import Settings

#: The context name the fetcher's state is set under.
STATE = "fetcher_state"
#: The fetcher's consumer group, on every topic it reads.
GROUP_ID = "evidentia-fetcher"


class FetcherState:
    def __init__(self, settings: Settings):
        package_ms = settings.ncbi.bookshelf_package_timeout_s * 1000
        if package_ms >= settings.kafka.max_poll_interval_ms:
            raise ValueError(
                f"EVIDENTIA_BOOKSHELF_PACKAGE_TIMEOUT_S ({settings.ncbi.bookshelf_package_timeout_s:g} s) must be "
                f"under EVIDENTIA_KAFKA_MAX_POLL_INTERVAL_MS ({settings.kafka.max_poll_interval_ms} ms), or a slow "
                "package would lose its partition and be read twice"
            )
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._client: EutilsClient | None = None
        self._bookshelf: BookshelfClient | None = None
        self._openfda: OpenFdaClient | None = None
        self._trials: ClinicalTrialsClient | None = None
        self._sources: FetcherSources | None = None

    async def start(self) -> None:
        self._pool = await create_pool(self.settings.database)
        add_dead_letter_hook(fail_documents_hook(self._pool))
        add_dead_letter_hook(fail_jobs_hook(self._pool))
        ncbi = self.settings.ncbi
        api_key = ncbi.ncbi_api_key.get_secret_value() if ncbi.ncbi_api_key else None
        limiter = make_limiter(ncbi.ncbi_rate_scope, rate_for(api_key, ncbi.ncbi_rate_per_s), self._pool)
        self._client = EutilsClient(ncbi, limiter=limiter)
        self._bookshelf = BookshelfClient(ncbi)

    def _trials_limiter(self) -> Limiter:
        """ClinicalTrials.gov's own bucket, shared by the replicas as the NCBI one is (same scope)."""
        rate = self.settings.clinicaltrials.rate_per_min / 60
        if self.settings.ncbi.ncbi_rate_scope == "cluster":
            return PgTokenBucket(self.pool, rate * CLUSTER_SAFETY, name=f"clinicaltrials:{rate:g}")
        return TokenBucket(rate)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._bookshelf is not None:
            await self._bookshelf.aclose()
        if self._openfda is not None:
            await self._openfda.aclose()
        if self._trials is not None:
            await self._trials.aclose()
        if self._pool is not None:
            await self._pool.close()

    async def ready(self) -> bool:
        return self._client is not None and await reachable(self.pool)

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "fetcher not started"
        return self._pool

    @property
    def client(self) -> EutilsClient:
        assert self._client is not None, "fetcher not started"
        return self._client

    @property
    def bookshelf(self) -> BookshelfClient:
        assert self._bookshelf is not None, "fetcher not started"
        return self._bookshelf

    @property
    def openfda(self) -> OpenFdaClient:
        """The openFDA client, made when first needed (it holds no connection until it is used)."""
        if self._openfda is None:
            self._openfda = OpenFdaClient(self.settings.openfda)
        return self._openfda

    @property
    def trials(self) -> ClinicalTrialsClient:
        """The ClinicalTrials.gov client, made the first time it is asked for (after :meth:`start`)."""
        if self._trials is None:
            self._trials = ClinicalTrialsClient(self.settings.clinicaltrials, limiter=self._trials_limiter())
        return self._trials

    @property
    def sources(self) -> FetcherSources:
        """Every source, built on the clients the first time it is asked for (after :meth:`start`)."""
        if self._sources is None:
            trials = ClinicalTrialsSource(self.trials, self.settings.clinicaltrials)
            labels = FdaLabelSource(self.openfda, self.settings.openfda)
            self._sources = FetcherSources(
                self.client, self.bookshelf, self.pool, self.settings.ncbi, inline=[trials, labels]
            )
        return self._sources


StateDep = Annotated[FetcherState, LoopContext(STATE)]
