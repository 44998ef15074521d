"""A chunk and its score in one ranking: what every leg and stage passes on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scored:
    """A chunk and its score in one ranking (higher: better)."""

    chunk_id: str
    score: float
