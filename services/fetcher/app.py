"""Fetcher service wiring (see :func:`shared.service.service_app`). No logic lives here."""

from __future__ import annotations

from services.fetcher.routers import register
from services.fetcher.state import FetcherState
from shared.service import service_app

app = service_app(
    "fetcher",
    FetcherState,
    register,
    "Discovers PubMed ids (searches, lists) and fetches their records from NCBI E-utilities.",
)
