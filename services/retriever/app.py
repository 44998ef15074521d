"""Retriever service wiring: broker, state, handlers, probes. No logic lives here."""

from __future__ import annotations

from services.retriever.handlers import RetrieverState, register
from shared.broker import make_broker
from shared.service import make_app
from shared.settings import get_settings

settings = get_settings()
broker = make_broker("retriever", settings)
state = RetrieverState(settings)
register(broker, state)
app = make_app(
    "retriever",
    broker,
    on_startup=[state.start],
    on_shutdown=[state.stop],
    ready=state.ready,
    description="Stores chunk vectors in pgvector and answers search requests (dense, lexical, hybrid).",
)
