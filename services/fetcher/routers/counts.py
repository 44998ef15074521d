"""``ncbi.requests`` (request/reply): PubMed hit counts (esearch ``rettype=count``) for the gateway's workflows,
and with ``max_ids`` the best matches' ids in relevance order (``/v1/ask``'s live fetch). A term NCBI refuses is
answered with a 422 error, any other NCBI failure with a 502."""

from __future__ import annotations

import logging

from faststream.kafka import KafkaRouter

from services.fetcher.eutils import EutilsError, EutilsQueryError
from services.fetcher.state import GROUP_ID, StateDep
from shared.events import ErrorInfo, NcbiCountReply, NcbiCountRequest
from shared.kafka.context import BrokerDep, KafkaMessage
from shared.kafka.reply_server import reply, request_subscriber_options
from shared.kafka.topics import NCBI_REQUESTS
from shared.settings import Settings

log = logging.getLogger(__name__)


async def on_count(
    request: NcbiCountRequest,
    msg: KafkaMessage,
    state: StateDep,
    broker: BrokerDep,
) -> None:
    try:
        if request.max_ids:
            found = await state.client.esearch(request.term, request.database, request.max_ids, sort="relevance")
            answer = NcbiCountReply(trace_id=request.trace_id, term=request.term, count=found.count, ids=found.pmids)
        else:
            count = await state.client.count(request.term, request.database)
            answer = NcbiCountReply(trace_id=request.trace_id, term=request.term, count=count)
    except EutilsQueryError as exc:  # NCBI refused the term: the caller's fault, not a retry
        answer = NcbiCountReply(
            trace_id=request.trace_id,
            term=request.term,
            error=ErrorInfo(type="EutilsQueryError", message=str(exc), status=422),
        )
    except EutilsError as exc:
        log.warning("count failed", extra={"term": request.term, "error": str(exc)})
        answer = NcbiCountReply(
            trace_id=request.trace_id,
            term=request.term,
            error=ErrorInfo(type=type(exc).__name__, message=str(exc), status=502),
        )
    await reply(broker, msg, answer)


def router(settings: Settings) -> KafkaRouter:
    """The ``ncbi.requests`` subscriber."""
    r = KafkaRouter()
    r.subscriber(
        NCBI_REQUESTS,
        group_id=GROUP_ID,
        **request_subscriber_options(settings.kafka, NCBI_REQUESTS),
        title="ncbi.requests:fetcher",
        description="An NcbiCountRequest; the NcbiCountReply (esearch count, and the best matches' ids when asked) "
        "goes to the reply_to topic.",
    )(on_count)
    return r
