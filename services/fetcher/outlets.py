"""The topics the fetcher publishes on, and how fetched documents are published.

The publishers are made once on the broker (they are part of the fetcher's AsyncAPI document) and reach the
routers through FastStream's context (:data:`OutletsDep`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from faststream.kafka import KafkaBroker
from faststream.kafka.publisher import DefaultPublisher

from services.fetcher.state import FetcherState
from shared.claimcheck import check_in, oversized_reason
from shared.db.jobs import set_stage
from shared.events import BookshelfPackageRequested, DocumentFetched, PmidDiscovered
from shared.kafka.context import LoopContext
from shared.kafka.topics import BOOKSHELF_PACKAGES, DOCUMENTS_FETCHED, PMIDS_DISCOVERED

log = logging.getLogger(__name__)

#: The context name the outlets are set under.
OUTLETS = "fetcher_outlets"


@dataclass(frozen=True)
class Outlets:
    """The fetcher's publishers: ``pmids.discovered``, ``documents.fetched`` and ``bookshelf.packages``."""

    discovered: DefaultPublisher
    fetched: DefaultPublisher
    packages: DefaultPublisher

    @classmethod
    def on(cls, broker: KafkaBroker) -> Outlets:
        return cls(
            discovered=broker.publisher(PMIDS_DISCOVERED, title="pmids.discovered", schema=PmidDiscovered),
            fetched=broker.publisher(DOCUMENTS_FETCHED, title="documents.fetched", schema=DocumentFetched),
            packages=broker.publisher(BOOKSHELF_PACKAGES, title="bookshelf.packages", schema=BookshelfPackageRequested),
        )


OutletsDep = Annotated[Outlets, LoopContext(OUTLETS)]


async def publish_documents(state: FetcherState, outlets: Outlets, docs: Sequence[DocumentFetched]) -> list[str]:
    """Publish fetched documents (large ones through the claim check); the ids published.

    A document that still cannot travel (over the message limit even so) is marked failed with the
    reason instead of failing its batch or job. Stages are set before publishing, so a parser that is
    quick cannot have its ``parsed`` overwritten by ``fetched``.
    """
    k = state.settings.kafka
    ready: list[tuple[DocumentFetched, bytes]] = []
    for doc in docs:
        checked = await check_in(state.pool, doc, k.claim_check_bytes)
        body = checked.model_dump_json().encode()
        reason = oversized_reason(len(body), k.max_request_size)
        if reason is not None:
            await set_stage(state.pool, [doc.document_id], "failed", reason, force=True)
            log.warning("document too large to publish", extra={"document_id": doc.document_id, "error": reason})
            continue
        ready.append((checked, body))
    await asyncio.gather(*(outlets.fetched.publish(d, key=d.document_id.encode()) for d, _ in ready))
    return [d.document_id for d, _ in ready]
