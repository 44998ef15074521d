"""Handler parameters filled from FastStream's context are resolved on the event loop, not in a worker thread
(``shared/kafka/context.py``): FastDepends runs a synchronous custom field in the thread pool for every
message, which cost each request hop a thread round trip."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated

from faststream import Context  # noqa: TID251  # the synchronous field, as the control
from faststream.kafka import KafkaBroker, TestKafkaBroker

from shared.kafka.context import BrokerDep, KafkaMessage, LoopContext


def _thread_recorder(seen: list[int]) -> Callable[[], int]:
    def initial() -> int:
        seen.append(threading.get_ident())
        return len(seen)

    return initial


async def test_a_loop_context_field_is_resolved_on_the_event_loops_thread() -> None:
    loop_thread = threading.get_ident()
    on_loop: list[int] = []
    in_pool: list[int] = []
    broker = KafkaBroker()

    @broker.subscriber("context-probe")
    async def handler(
        a: Annotated[int, LoopContext("probe_loop", initial=_thread_recorder(on_loop))],
        b: Annotated[int, Context("probe_pool", initial=_thread_recorder(in_pool))],
    ) -> None:
        pass

    async with TestKafkaBroker(broker) as test:
        await test.publish(b"{}", "context-probe")

    assert on_loop == [loop_thread]
    assert len(in_pool) == 1 and in_pool[0] != loop_thread  # what FastStream's own Context does, per message


async def test_the_message_and_the_broker_reach_the_handler() -> None:
    broker = KafkaBroker()
    seen: list[tuple[str | None, bytes, bool]] = []

    @broker.subscriber("context-message")
    async def handler(msg: KafkaMessage, taken_by: BrokerDep) -> None:
        seen.append((msg.correlation_id, msg.body, taken_by is broker))

    async with TestKafkaBroker(broker) as test:
        await test.publish(b'{"x": 1}', "context-message", correlation_id="cid-7")

    assert seen == [("cid-7", b'{"x": 1}', True)]
