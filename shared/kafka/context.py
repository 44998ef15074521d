"""Handler parameters that FastStream fills from its context, resolved on the event loop.

FastStream's :class:`faststream.Context` (and the ``faststream.kafka.KafkaMessage`` annotation built on it) is a
synchronous FastDepends custom field, and FastDepends runs a synchronous field's ``use`` in a worker thread for
each message an async handler takes: a thread round trip per such parameter per message, waiting on the thread
pool and the GIL (seen in every request's profile of the gateway and the retriever; ~0.1 ms of CPU a hop on the
benchmark's two cores: ``docs/benchmarks.md``, sixth session). The lookup itself is a dictionary read, so
:class:`LoopContext` does it on the event loop: FastDepends awaits an async field's ``use`` in place. Handlers
take their message, broker and state through the annotations here; ruff bans the synchronous ones
(``pyproject.toml``, ``banned-api``).
"""

from __future__ import annotations

from typing import Annotated, Any

from faststream._internal.context import Context  # the class behind faststream.Context (a function)
from faststream.kafka import KafkaBroker
from faststream.kafka.message import KafkaMessage as KafkaRecord


class LoopContext(Context):
    """FastStream's ``Context``, resolved on the event loop instead of in a worker thread."""

    async def use(self, /, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]  # async on purpose
        resolved: dict[str, Any] = super().use(**kwargs)
        return resolved


KafkaMessage = Annotated[KafkaRecord, LoopContext("message")]
"""The message being handled (FastStream's ``KafkaMessage``, resolved on the loop)."""
BrokerDep = Annotated[KafkaBroker, LoopContext("broker")]
"""The broker that took the message."""
