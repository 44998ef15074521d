"""Synthesizer service wiring: broker, state, handlers, probes. No logic lives here."""

from __future__ import annotations

from services.synthesizer.handlers import SynthesizerState, register
from shared.broker import make_broker
from shared.service import make_app
from shared.settings import get_settings

settings = get_settings()
broker = make_broker("synthesizer", settings)
state = SynthesizerState(settings)
register(broker, state)
app = make_app(
    "synthesizer",
    broker,
    on_startup=[state.start],
    ready=state.ready,
    description="Answers synthesis requests with cited answers: Claude when configured, else extractive.",
)
