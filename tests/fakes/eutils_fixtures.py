"""Pytest fixtures of the fake E-utilities server and a client pointed at it, for the unit tests of the fetcher
(tests/unit/fetcher/conftest.py) and the integration tests that also need PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator

import pytest

from services.fetcher.eutils import EutilsClient
from services.fetcher.ratelimit import TokenBucket
from shared.settings import NcbiSettings
from tests.fakes.eutils_server import FakeEutils, SleepRecorder, fake_ncbi_settings


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
