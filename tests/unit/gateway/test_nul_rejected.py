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


def test_every_route_refuses_an_escaped_nul_but_not_an_escaped_backslash() -> None:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from services.gateway.app import refuse_nul_characters

    app = FastAPI(dependencies=[Depends(refuse_nul_characters)])

    @app.post("/echo")
    async def echo(body: dict[str, str]) -> dict[str, str]:
        return body

    client = TestClient(app)
    r = client.post("/echo", content=b'{"condition": "malaria\\u0000"}', headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert "NUL" in r.text
    ok = client.post("/echo", content=b'{"condition": "C:\\\\u0000dir"}', headers={"content-type": "application/json"})
    assert ok.status_code == 200
    assert ok.json() == {"condition": "C:\\u0000dir"}
