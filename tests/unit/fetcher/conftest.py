"""Fixtures of the fetcher tests: the fake E-utilities server and clients pointed at it."""

from __future__ import annotations

import random
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# ``tests.fakes`` is imported by package name; the repository root is not on sys.path when pytest
# runs as ``.venv/bin/pytest`` (``pythonpath = ["."]`` in pytest's settings would make this moot).
_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from services.fetcher.eutils import EutilsClient  # noqa: E402
from services.fetcher.ratelimit import TokenBucket  # noqa: E402
from shared.settings import NcbiSettings  # noqa: E402
from tests.fakes.eutils_server import FakeEutils, SleepRecorder, fake_ncbi_settings  # noqa: E402


@pytest.fixture
def fake_eutils() -> Iterator[FakeEutils]:
    """A started fake E-utilities server with the recorded fixtures loaded."""
    with FakeEutils() as fake:
        yield fake


def make_settings(fake: FakeEutils, **overrides: object) -> NcbiSettings:
    """The tests' settings: small pages and batches so paging and batching show."""
    return fake_ncbi_settings(fake, **{"esearch_page_size": 30, "efetch_batch": 3, **overrides})


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
async def client(fake_eutils: FakeEutils, sleeps: SleepRecorder) -> AsyncIterator[EutilsClient]:
    """A client on the fake: no real back-off sleeps, a limiter fast enough not to matter."""
    settings = make_settings(fake_eutils)
    async with EutilsClient(settings, limiter=TokenBucket(10_000, burst=100), sleep=sleeps, rng=random.Random(7)) as c:
        yield c
