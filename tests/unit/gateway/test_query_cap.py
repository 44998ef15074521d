"""Bounded work per request: a query longer than the longest useful one is refused at once (422)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.gateway.schemas import AskRequest, SearchRequest
from shared.models import MAX_QUERY_CHARS, query_terms, truncate_terms
from shared.settings import get_settings
from tests.unit.gateway.conftest import build_app, client

#: The issue's request: 10,000 characters, about 1,500 words.
LONG_QUERY = ("aspirin reduces the risk of stroke in patients " * 250)[:10_000]


def test_terms_are_runs_of_letters_and_digits() -> None:
    assert query_terms("Does COVID-19 raise HbA1c?  (yes/no)") == ["Does", "COVID", "19", "raise", "HbA1c", "yes", "no"]
    assert len(query_terms(LONG_QUERY)) > 1400


def test_truncate_keeps_the_first_terms_and_their_text() -> None:
    assert truncate_terms("a, b; c d", 2) == "a, b"
    assert truncate_terms("a b", 5) == "a b"
    cut = truncate_terms(LONG_QUERY, 200)
    assert len(query_terms(cut)) == 200 and LONG_QUERY.startswith(cut)


def test_the_cap_is_a_documented_setting() -> None:
    field = type(get_settings().retrieval).model_fields["max_query_terms"]
    assert field.default == 200 and "422" in (field.description or "")


def test_a_query_at_the_cap_is_accepted_one_term_more_is_not() -> None:
    cap = get_settings().retrieval.max_query_terms
    assert SearchRequest.model_validate({"query": " ".join(["term"] * cap)})
    with pytest.raises(ValidationError, match=f"has {cap + 1} terms; at most {cap}"):
        SearchRequest.model_validate({"query": " ".join(["term"] * (cap + 1))})
    with pytest.raises(ValidationError, match="question has"):
        AskRequest.model_validate({"question": " ".join(["term"] * (cap + 1))})


@pytest.mark.parametrize(
    ("path", "body"), [("/v1/search", {"query": LONG_QUERY}), ("/v1/ask", {"question": LONG_QUERY})]
)
async def test_a_10000_character_query_gets_a_prompt_422_and_never_reaches_the_retriever(
    path: str, body: dict[str, str]
) -> None:
    app, kafka, _ = build_app()
    async with client(app) as c:
        r = await c.post(path, json=body)
        assert r.status_code == 422, r.text
        assert "EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS" in r.text
        # refused during request validation: nothing was published (no clock in tests; see bench/load.py)
        assert kafka.retrievals == [] and kafka.syntheses == []
        # an ordinary question right after is served as usual
        ok = await c.post("/v1/search", json={"query": "aspirin and stroke"})
        assert ok.status_code == 200 and len(kafka.retrievals) == 1


#: The issue's query form: findings of 5,000 words in all (its keywords are over 10,000 characters).
HUGE_FORM = {"kind": "condition-findings", "condition": "malaria", "findings": ["symptom: fever " * 250] * 10}
#: A form under 10,000 characters but far over the term cap (50 findings of 40 short terms).
WIDE_FORM = {"kind": "condition-findings", "condition": "malaria", "findings": ["lab: a b c d e f g h " * 5] * 50}


@pytest.mark.parametrize("form", [HUGE_FORM, WIDE_FORM], ids=["5000-words", "under-10000-characters"])
async def test_a_query_form_rendered_over_the_cap_gets_a_422_naming_it_not_a_500(form: dict[str, object]) -> None:
    assert len(query_terms(" ".join(form["findings"]))) > 1000  # type: ignore[arg-type]
    app, kafka, _ = build_app()
    async with client(app) as c:
        r = await c.post("/v1/search", json={"query_form": form})
        assert r.status_code == 422, r.text
        assert "query_form (as searched) has" in r.text and "EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS" in r.text
        assert kafka.retrievals == []
        ok = await c.post("/v1/search", json={"query_form": {**form, "findings": ["symptom: fever 3 days"]}})
        assert ok.status_code == 200 and len(kafka.retrievals) == 1


def test_a_form_of_few_terms_but_over_10000_characters_is_refused_too() -> None:
    form = {"kind": "condition-findings", "condition": "malaria", "findings": ["x" * 6000, "y" * 6000]}
    with pytest.raises(ValidationError, match=f"characters; at most {MAX_QUERY_CHARS}"):
        SearchRequest.model_validate({"query_form": form})
