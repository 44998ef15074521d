"""Synthesizer service: answers ``synthesis.requests`` with cited answers (Claude, or extractive offline)."""
