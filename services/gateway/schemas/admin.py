"""Bodies of ``/v1/admin/dlq``: which dead letters to replay, and what became of each."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReplayRequest(BaseModel):
    refs: list[str] = Field(default_factory=list, description="Letters to replay: PARTITION:OFFSET or OFFSET.")
    all: bool = Field(False, description="Every letter not replayed yet (or, with force, every letter).")
    error_type: str | None = Field(None, description="With all: only letters of this error type.")
    force: bool = Field(False, description="Replay letters that were replayed before, too.")


class ReplayResult(BaseModel):
    ref: str
    topic: str
    status: str
    detail: str = ""
