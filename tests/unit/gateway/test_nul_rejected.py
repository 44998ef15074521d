"""PostgreSQL text cannot hold NUL: requests carrying one are refused with a reason, never a 500."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.gateway.schemas import AskRequest, IngestRequest, SearchRequest


@pytest.mark.parametrize(
    "build",
    [
        lambda: IngestRequest.model_validate({"documents": [{"source_id": "nul\u0000id", "title": "A title"}]}),
        lambda: IngestRequest.model_validate({"query": "aspirin\u0000"}),
        lambda: SearchRequest.model_validate({"query": "aspirin\u0000stroke"}),
        lambda: AskRequest.model_validate({"question": "does aspirin\u0000 help?"}),
    ],
)
def test_nul_characters_are_a_validation_error(build: object) -> None:
    with pytest.raises(ValidationError, match="NUL"):
        build()  # type: ignore[operator]


def test_ordinary_text_passes() -> None:
    assert SearchRequest.model_validate({"query": "aspirin and stroke"}).query == "aspirin and stroke"
    assert IngestRequest.model_validate({"pmids": ["123"]}).pmids == ["123"]
