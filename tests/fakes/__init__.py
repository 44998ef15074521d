"""Fakes of external services, for tests, integration tests and ``make demo``."""

from tests.fakes.eutils_server import FakeEutils, RecordedRequest

__all__ = ["FakeEutils", "RecordedRequest"]
