"""Embedder service wiring (see :func:`shared.service.service_app`). No logic lives here."""

from __future__ import annotations

from services.embedder.handlers import EmbedderState, register
from shared.service import service_app

app = service_app(
    "embedder",
    EmbedderState,
    register,
    "Embeds chunks in batches with the configured embedding model (GPU when present).",
    details=EmbedderState.health,
)
