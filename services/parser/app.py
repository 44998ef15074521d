"""Parser service wiring: broker, state, handlers, probes. No logic lives here."""

from __future__ import annotations

from services.parser.handlers import ParserState, register
from shared.broker import make_broker
from shared.service import make_app
from shared.settings import get_settings

settings = get_settings()
broker = make_broker("parser", settings)
state = ParserState(settings)
register(broker, state)
app = make_app(
    "parser",
    broker,
    on_startup=[state.start],
    on_shutdown=[state.stop],
    ready=state.ready,
    description="Parses raw PubMed, PMC JATS and Bookshelf NXML documents, stores them, and emits their chunks.",
)
