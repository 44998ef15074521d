"""Parser service wiring (see :func:`shared.service.service_app`). No logic lives here."""

from __future__ import annotations

from services.parser.handlers import ParserState, register
from shared.service import service_app

app = service_app(
    "parser",
    ParserState,
    register,
    "Parses raw PubMed, PMC JATS and Bookshelf NXML documents, stores them, and emits their chunks.",
)
