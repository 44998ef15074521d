"""Retrieval metrics against hand-computed cases (and against ir-measures/trec_eval where installed)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from evaluation.retrieval import (
    EmbeddingCache,
    compute_metrics,
    compute_metrics_builtin,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
)


def test_ndcg_hand_computed() -> None:
    # relevant d1 (grade 1) at rank 2 and d2 (grade 2) at rank 3; ideal: d2 then d1.
    qrels = {"d1": 1, "d2": 2, "d9": 0}
    ranking = ["x", "d1", "d2", "y"]
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(qrels, ranking, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(qrels, ["d2", "d1"], 10) == pytest.approx(1.0)
    assert ndcg_at_k(qrels, ranking, 1) == 0.0
    assert ndcg_at_k({"d1": 1}, [], 10) == 0.0


def test_recall_and_mrr_hand_computed() -> None:
    qrels = {"a": 1, "b": 1, "c": 1, "z": 0}
    ranking = ["z", "q", "b", "a"]
    assert recall_at_k(qrels, ranking, 100) == pytest.approx(2 / 3)
    assert recall_at_k(qrels, ranking, 3) == pytest.approx(1 / 3)
    assert mrr_at_k(qrels, ranking, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(qrels, ranking, 2) == 0.0


def test_mean_over_queries_and_missing_runs_score_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}  # q3 has no relevant doc: not counted
    run = {"q1": {"a": 2.0, "x": 1.0}, "q2": {"x": 2.0, "b": 1.0}}
    m = compute_metrics_builtin(qrels, run, recall_ks=[1])
    assert m["MRR@10"] == pytest.approx((1 + 0.5) / 2)
    assert m["nDCG@10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert m["Recall@100"] == pytest.approx(1.0)
    assert m["Recall@1"] == pytest.approx(0.5)
    m2 = compute_metrics_builtin({"q1": {"a": 1}, "q2": {"b": 1}}, {"q1": {"a": 1.0}})
    assert m2["MRR@10"] == pytest.approx(0.5)


def test_library_agrees_with_builtin() -> None:
    pytest.importorskip("ir_measures")
    qrels = {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}, "q3": {"d": 1}}
    run = {"q1": {"x": 3.0, "b": 2.0, "a": 1.0}, "q2": {"c": 5.0}, "q3": {"y": 1.0}}
    lib, impl = compute_metrics(qrels, run, recall_ks=[1])
    assert impl == "ir-measures"
    own = compute_metrics_builtin(qrels, run, recall_ks=[1])
    for name, value in own.items():
        assert lib[name] == pytest.approx(value), name
    # a query without any result counts as 0 in both
    lib2, _ = compute_metrics(qrels, {"q1": run["q1"]})
    own2 = compute_metrics_builtin(qrels, {"q1": run["q1"]})
    assert lib2["nDCG@10"] == pytest.approx(own2["nDCG@10"])


def test_embedding_cache_round_trip(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.asarray([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    cache = EmbeddingCache(tmp_path, "org/model-1")
    first = cache.encode("passage", ["a", "bb", "a"], encode)
    assert first.shape == (3, 2) and len(calls) == 1 and sorted(calls[0]) == ["a", "bb"]
    cache.save()
    again = EmbeddingCache(tmp_path, "org/model-1")
    second = again.encode("passage", ["bb", "a"], encode)
    assert len(calls) == 1  # everything came from the file
    assert np.allclose(second, first[[1, 0]])
    again.encode("query", ["a"], encode)
    assert calls[-1] == ["a"]  # queries and passages are cached apart


def test_parse_variant() -> None:
    from cli.eval import parse_variant

    assert parse_variant("w2:mode=hybrid,dense_weight=2,rrf_k=20") == (
        "w2",
        {"mode": "hybrid", "dense_weight": 2, "rrf_k": 20},
    )
    assert parse_variant("t:bm25_b=0.75") == ("t", {"bm25_b": 0.75})
