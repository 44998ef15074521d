"""``shared.models.relevant_hits``: the one relevance threshold (``EVIDENTIA_RETRIEVAL_MIN_SCORE``) that the
synthesizer (what it may cite) and the gateway (when a guideline question falls back to every source) apply."""

from __future__ import annotations

import pytest

from shared.models import relevant_hits
from shared.settings import RetrievalSettings, Settings
from tests.factories import search_hit


def test_hits_at_or_above_the_threshold_and_lexical_only_hits_are_evidence_in_their_order() -> None:
    hits = [
        search_hit("1", "under", dense_score=0.19),
        search_hit("2", "lexical leg only", rank=2, dense_score=None),
        search_hit("3", "at the threshold", rank=3, dense_score=0.2),
        search_hit("4", "above", rank=4, dense_score=0.9),
    ]
    assert [h.pmid for h in relevant_hits(hits, 0.2)] == ["2", "3", "4"]
    assert [h.pmid for h in relevant_hits(hits, 0.95)] == ["2"]
    assert relevant_hits([], 0.2) == []


def test_the_threshold_is_one_setting_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVIDENTIA_RETRIEVAL_MIN_SCORE", "0.5")
    floor = RetrievalSettings().min_score  # type: ignore[call-arg]
    assert floor == 0.5
    assert relevant_hits([search_hit("1", "t", dense_score=0.4)], floor) == []


@pytest.mark.parametrize(
    ("model", "floor"),
    [("all-MiniLM-L6-v2", 0.2), ("bge-small-en-v1.5", 0.61), ("e5-small-v2", 0.8), ("/models/my-own", 0.2)],
)
def test_without_a_setting_the_floor_is_the_embedding_models_own(
    monkeypatch: pytest.MonkeyPatch, model: str, floor: float
) -> None:
    # Cosine ranges differ by model: bge-small scores an unrelated pair ~0.56, so MiniLM's 0.2 would pass
    # everything; a model Evidentia does not know gets the generic floor.
    monkeypatch.delenv("EVIDENTIA_RETRIEVAL_MIN_SCORE", raising=False)
    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODEL", model)
    assert Settings().relevance_floor == floor


def test_a_set_threshold_wins_over_the_models_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVIDENTIA_EMBEDDING_MODEL", "bge-small-en-v1.5")
    monkeypatch.setenv("EVIDENTIA_RETRIEVAL_MIN_SCORE", "0.3")
    assert Settings().relevance_floor == 0.3
    monkeypatch.setenv("EVIDENTIA_RETRIEVAL_MIN_SCORE", "0")
    assert Settings().relevance_floor == 0.0


def test_the_shipped_default_is_the_held_out_winner(monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/benchmarks.md, issue #17: bge-small-en-v1.5 with convex fusion 0.6 / 0.4 won every fold.
    for name in ("EVIDENTIA_EMBEDDING_MODEL", "EVIDENTIA_RETRIEVAL_FUSION", "EVIDENTIA_RETRIEVAL_MIN_SCORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("EVIDENTIA_RETRIEVAL_DENSE_WEIGHT", raising=False)
    monkeypatch.delenv("EVIDENTIA_RETRIEVAL_LEXICAL_WEIGHT", raising=False)
    settings = Settings()
    assert settings.embedding.model == "bge-small-en-v1.5"
    assert (settings.retrieval.fusion, settings.retrieval.dense_weight, settings.retrieval.lexical_weight) == (
        "convex",
        0.6,
        0.4,
    )
    assert settings.relevance_floor == 0.61
    assert settings.support.similarity_model == "all-MiniLM-L6-v2"  # the most accurate calibrated support model
