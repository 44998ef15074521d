"""The fetcher's subscribers, one FastStream ``KafkaRouter`` per concern, and the one place they are wired.

- :mod:`.ingest`: ``ingest.requests`` -> discovery at each source;
- :mod:`.pmids`: ``pmids.discovered`` -> PubMed records (and PMC full text) on ``documents.fetched``;
- :mod:`.packages`: ``bookshelf.packages`` -> a Bookshelf package's parts on ``documents.fetched``;
- :mod:`.counts`: ``ncbi.requests`` -> PubMed hit counts (request/reply).

The handlers take the fetcher's state and publishers from FastStream's context, set here.
"""

from __future__ import annotations

from faststream.kafka import KafkaBroker

from services.fetcher.outlets import OUTLETS, Outlets
from services.fetcher.routers import counts, ingest, packages, pmids
from services.fetcher.state import STATE, FetcherState


def register(broker: KafkaBroker, state: FetcherState) -> None:
    """Put the fetcher's state and publishers in ``broker``'s context and include every router."""
    broker.context.set_global(STATE, state)
    broker.context.set_global(OUTLETS, Outlets.on(broker))
    for module in (ingest, packages, pmids, counts):
        broker.include_router(module.router(state.settings))


__all__ = ["register"]
