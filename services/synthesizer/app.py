"""Synthesizer service wiring (see :func:`shared.service.service_app`). No logic lives here."""

from __future__ import annotations

from services.synthesizer.handlers import SynthesizerState, register
from shared.service import service_app

app = service_app(
    "synthesizer",
    SynthesizerState,
    register,
    "Answers synthesis requests with cited answers: Claude when configured, else extractive.",
)
