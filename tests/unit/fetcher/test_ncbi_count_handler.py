"""The fetcher serves PubMed hit counts on ``ncbi.requests`` (request/reply) for the gateway's workflows."""

from __future__ import annotations

from faststream.kafka import KafkaBroker, TestKafkaBroker

from services.fetcher.eutils import EutilsClient
from services.fetcher.routers import register
from services.fetcher.state import FetcherState
from shared.events import NcbiCountReply, NcbiCountRequest
from shared.kafka.context import KafkaMessage
from shared.kafka.topics import NCBI_REQUESTS
from shared.settings import Settings
from tests.fakes.eutils_server import FakeEutils, fake_ncbi_settings

REPLIES = "replies.test-gateway"


async def test_count_request_is_answered_on_reply_to() -> None:
    with FakeEutils() as fake:
        fake.add_search("bupropion AND obesity", ["1", "2", "3", "4"])
        state = FetcherState(Settings())
        state._client = EutilsClient(fake_ncbi_settings(fake))
        broker = KafkaBroker()
        register(broker, state)
        got: list[tuple[str, NcbiCountReply]] = []

        @broker.subscriber(REPLIES)
        async def collect(msg: KafkaMessage) -> None:
            if not msg.body:  # FastStream's own empty answer to reply_to (the handler returns None)
                return
            got.append((msg.correlation_id, NcbiCountReply.model_validate_json(msg.body)))

        async with TestKafkaBroker(broker) as br:
            await br.publish(
                NcbiCountRequest(term="bupropion AND obesity"),
                topic=NCBI_REQUESTS,
                correlation_id="c-1",
                reply_to=REPLIES,
            )
            await br.publish(
                NcbiCountRequest(term="no such thing"), topic=NCBI_REQUESTS, correlation_id="c-2", reply_to=REPLIES
            )
        await state.client.aclose()
    replies = dict(got)
    assert replies["c-1"].count == 4 and replies["c-1"].error is None
    assert replies["c-2"].count == 0
    assert any(r.param("rettype") == "count" for r in fake.requests_to("esearch"))
