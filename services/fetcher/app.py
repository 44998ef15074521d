"""Fetcher service wiring: broker, state, handlers, probes. No logic lives here."""

from __future__ import annotations

from services.fetcher.handlers import FetcherState, register
from shared.broker import make_broker
from shared.service import make_app
from shared.settings import get_settings

settings = get_settings()
broker = make_broker("fetcher", settings)
state = FetcherState(settings)
register(broker, state)
app = make_app(
    "fetcher",
    broker,
    on_startup=[state.start],
    on_shutdown=[state.stop],
    ready=state.ready,
    description="Discovers PubMed ids (searches, lists) and fetches their records from NCBI E-utilities.",
)
