from __future__ import annotations

import pytest

from services.retriever.engine.ranking.fusion import ReciprocalRankFusion


def test_rrf_matches_hand_computed_scores() -> None:
    fused = ReciprocalRankFusion(k=60).fuse([["a", "b", "c"], ["b", "d"]])
    scores = dict(fused)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["d"] == pytest.approx(1 / 62)
    assert [d for d, _ in fused] == ["b", "a", "d", "c"]


def test_rrf_weights_change_the_order() -> None:
    fused = ReciprocalRankFusion(k=0, weights=[1.0, 3.0]).fuse([["a", "b"], ["b", "a"]])
    assert fused[0][0] == "b"


def test_rrf_ties_keep_first_seen_order_and_bad_weights_fail() -> None:
    assert [d for d, _ in ReciprocalRankFusion().fuse([["x"], ["y"]])] == ["x", "y"]
    with pytest.raises(ValueError):
        ReciprocalRankFusion(weights=[1.0]).fuse([["a"], ["b"]])


def test_convex_fusion_hand_computed() -> None:
    from services.retriever.engine.ranking.fusion import ConvexFusion

    dense = [("a", 0.9), ("b", 0.7), ("c", 0.5)]  # normalised: a 1, b .5, c 0
    lexical = [("b", 12.0), ("d", 4.0)]  # normalised: b 1, d 0
    fused = dict(ConvexFusion([0.6, 0.4]).fuse([dense, lexical]))
    assert fused["a"] == pytest.approx(0.6)
    assert fused["b"] == pytest.approx(0.6 * 0.5 + 0.4)
    assert fused["c"] == pytest.approx(0.0) and fused["d"] == pytest.approx(0.0)
    assert [d for d, _ in ConvexFusion([0.6, 0.4]).fuse([dense, lexical])][:2] == ["b", "a"]
    assert ConvexFusion().fuse([[("x", 1.0)], []]) == [("x", 1.0)]
    with pytest.raises(ValueError):
        ConvexFusion([1.0]).fuse([[], []])
