"""Embedder service wiring: broker, state, handlers, probes. No logic lives here."""

from __future__ import annotations

from services.embedder.handlers import EmbedderState, register
from shared.broker import make_broker
from shared.service import make_app
from shared.settings import get_settings

settings = get_settings()
broker = make_broker("embedder", settings)
state = EmbedderState(settings)
register(broker, state)
app = make_app(
    "embedder",
    broker,
    on_startup=[state.start],
    on_shutdown=[state.stop],
    ready=state.ready,
    description="Embeds chunks in batches with the configured sentence-transformers model (GPU when present).",
)
