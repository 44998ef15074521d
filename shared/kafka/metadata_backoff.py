"""A patch of aiokafka so that a producer waits between metadata updates while the broker is unreachable."""

from __future__ import annotations

import asyncio
from typing import Any


def install_metadata_backoff() -> bool:
    """Make aiokafka wait ``retry_backoff_ms`` after a failed metadata update (idempotent).

    While the broker is unreachable, aiokafka's producer sender loop asks for a metadata update, which fails at
    once (connection refused), and asks again at once: a busy loop that logs thousands of errors a second per
    process and burns a CPU core for the whole outage (aiokafka 0.14; measured in docs/benchmarks.md). With the
    patch the update fails after the client's own retry back-off (100 ms by default), so an outage costs a few
    requests a second. True when the patch is in place.
    """
    from aiokafka.client import AIOKafkaClient

    original = getattr(AIOKafkaClient, "_metadata_update", None)
    if original is None:  # a future aiokafka without it: nothing to patch
        return False
    if getattr(original, "_evidentia_backoff", False):
        return True

    async def _metadata_update(self: AIOKafkaClient, cluster_metadata: Any, topics: Any) -> bool:
        ok = bool(await original(self, cluster_metadata, topics))
        if not ok:
            await asyncio.sleep(float(getattr(self, "_retry_backoff", 0.1)))
        return ok

    _metadata_update._evidentia_backoff = True  # type: ignore[attr-defined]
    AIOKafkaClient._metadata_update = _metadata_update  # type: ignore[method-assign]
    return True
