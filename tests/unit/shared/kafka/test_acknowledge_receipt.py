"""A request is committed to Kafka before work that must not run twice starts (the synthesizer's model call):
the auto-commit alone leaves a window in which a killed instance takes the same request again on restart."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import CommitFailedError, KafkaError

from shared.kafka.context import KafkaMessage
from shared.kafka.reply_server import acknowledge_receipt


class Consumer:
    def __init__(self, error: KafkaError | None = None) -> None:
        self.commits = 0
        self.error = error

    async def commit(self) -> None:
        if self.error is not None:
            raise self.error
        self.commits += 1


def message(consumer: Consumer) -> KafkaMessage:
    return KafkaMessage(body=b"{}", raw_message=None, consumer=consumer, correlation_id="c-1")  # type: ignore[arg-type]


async def test_the_consumed_offsets_are_committed_at_once() -> None:
    consumer = Consumer()
    assert await acknowledge_receipt(message(consumer)) is True
    assert consumer.commits == 1


async def test_a_failed_commit_is_logged_and_the_request_still_handled(caplog: pytest.LogCaptureFixture) -> None:
    consumer = Consumer(CommitFailedError("rebalance in progress"))
    with caplog.at_level("WARNING", logger="shared.kafka.reply_server"):
        assert await acknowledge_receipt(message(consumer)) is False
    assert any("not committed" in r.getMessage() for r in caplog.records)
    warned: Any = caplog.records[-1]
    assert warned.correlation_id == "c-1"


async def test_an_error_that_is_not_kafkas_is_not_swallowed() -> None:
    class Broken(Consumer):
        async def commit(self) -> None:
            raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        await acknowledge_receipt(message(Broken()))
