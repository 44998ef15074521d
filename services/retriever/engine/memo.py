"""Rankings of the legs memoised across searches: runs that change only what follows the legs (fusion,
feedback, rerank) reuse them instead of querying the store again (the retrieval evaluation's variants)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable

from services.retriever.engine.scored import Scored


class LegMemo:
    """A leg's ranking by everything it depends on (the caller's key)."""

    def __init__(self) -> None:
        self._legs: dict[Hashable, list[Scored]] = {}

    async def get(self, key: Hashable, rank: Callable[[], Awaitable[list[Scored]]]) -> list[Scored]:
        """The ranking memoised under ``key``, computed by ``rank`` the first time."""
        if key not in self._legs:
            self._legs[key] = await rank()
        return self._legs[key]
