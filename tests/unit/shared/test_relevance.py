"""``shared.models.relevant_hits``: the one relevance threshold (``EVIDENTIA_RETRIEVAL_MIN_SCORE``) that the
synthesizer (what it may cite) and the gateway (when a guideline question falls back to every source) apply."""

from __future__ import annotations

import pytest

from shared.models import relevant_hits
from shared.settings import RetrievalSettings
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
