"""The priority blend of the retriever (services/retriever/engine/ranking/blends.py ``priority_boosted``)."""

from __future__ import annotations

import pytest

from services.retriever.engine.ranking.blends import priority_boosted
from shared.settings import RetrievalSettings


def test_zero_boost_leaves_the_ranking_alone() -> None:
    ranked = [("a", 0.5), ("b", 0.4)]
    assert priority_boosted(ranked, {"a": 10, "b": 100}, 0.0) is ranked


def test_the_formula_and_the_new_order() -> None:
    ranked = [("low", 1.0), ("normal", 0.95), ("high", 0.9), ("unknown", 0.85)]
    out = dict(priority_boosted(ranked, {"low": 10, "normal": 50, "high": 100}, 0.1))
    assert out["low"] == pytest.approx(1.0 - 0.1 * 40 / 50)  # 0.92
    assert out["normal"] == pytest.approx(0.95)
    assert out["high"] == pytest.approx(0.9 * 1.1)  # 0.99
    assert out["unknown"] == pytest.approx(0.85)  # unknown counts as normal
    order = [c for c, _ in priority_boosted(ranked, {"low": 10, "normal": 50, "high": 100}, 0.1)]
    assert order == ["high", "normal", "low", "unknown"]


def test_a_negative_score_still_moves_the_right_way() -> None:
    out = dict(priority_boosted([("a", -0.2), ("b", -0.2)], {"a": 100, "b": 10}, 0.5))
    assert out["a"] > -0.2 > out["b"]


def test_ties_keep_their_order() -> None:
    ranked = [("x", 0.3), ("y", 0.3), ("z", 0.3)]
    assert [c for c, _ in priority_boosted(ranked, {}, 0.2)] == ["x", "y", "z"]


def test_the_setting_is_off_by_default_and_bounded() -> None:
    assert RetrievalSettings().priority_boost == 0.0  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        RetrievalSettings(priority_boost=2)  # type: ignore[call-arg]
