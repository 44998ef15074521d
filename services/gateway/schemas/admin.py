"""Bodies of ``/v1/admin/dlq`` (which dead letters to replay, and what became of each) and of
``PATCH /v1/documents/{id}`` (a document's priority)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shared.models import PRIORITY_EXCLUDED, PRIORITY_HIGH


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


class DocumentPatch(BaseModel):
    """What of a stored document may be changed in place."""

    model_config = ConfigDict(extra="forbid")

    priority: int = Field(
        ge=PRIORITY_EXCLUDED,
        le=PRIORITY_HIGH,
        description="Search priority (seed 003): 0 never returned by search, 10 low, 50 normal, 100 high.",
    )


class DocumentPriority(BaseModel):
    document_id: str
    priority: int
