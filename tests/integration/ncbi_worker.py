"""One fetcher process's NCBI client, for the cluster rate-limit test (``python -m tests.integration.ncbi_worker N``).

Builds :class:`FetcherState` exactly as the fetcher service does (settings from the environment: database,
E-utilities URL, ``EVIDENTIA_NCBI_RATE_SCOPE``), prints ``ready``, waits for a line on stdin, then makes N
esearch count calls without retries and prints a JSON line: calls made, failures.
"""

from __future__ import annotations

import asyncio
import json
import sys

from services.fetcher.eutils import EutilsError, RetryPolicy
from services.fetcher.state import FetcherState
from shared.settings import Settings


async def main(calls: int) -> None:
    state = FetcherState(Settings())
    await state.start()
    state.client.policy = RetryPolicy(max_retries=0)  # a 429 must show, not be retried away
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    ok = failed = 0
    for _ in range(calls):
        try:
            await state.client.count("biopython")
            ok += 1
        except EutilsError:
            failed += 1
    await state.stop()
    print(json.dumps({"ok": ok, "failed": failed}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
