"""Retriever service wiring (see :func:`shared.service.service_app`). No logic lives here."""

from __future__ import annotations

from services.retriever.handlers import RetrieverState, register
from shared.service import service_app

app = service_app(
    "retriever",
    RetrieverState,
    register,
    "Stores chunk vectors in pgvector and answers search requests (dense, lexical, hybrid).",
)
