"""The body of ``/v1/conversations/{id}``: a conversation's messages and its reference list."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from shared.events import Citation, CitationCheck, EvidenceSummary


class MessageView(BaseModel):
    turn: int
    role: str
    content: str = Field(description="User: the question as asked. Assistant: the answer citing [n].")
    standalone_question: str | None = Field(None, description="User: the question as searched (rewritten).")
    answer_with_ids: str | None = Field(None, description="Assistant: the answer citing [PMID:...] ids.")
    mode: str | None = None
    citations: list[Citation] = Field(default_factory=list, description="Assistant: the sources this turn cites.")
    citation_check: CitationCheck | None = None
    summary: EvidenceSummary | None = None
    created_at: datetime | None = None


class ConversationView(BaseModel):
    conversation_id: str
    title: str
    created_at: datetime
    updated_at: datetime
    messages: list[MessageView]
    references: list[Citation] = Field(description="Every source cited in the conversation, by display number.")
