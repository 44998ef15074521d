"""The fold protocol: settings are chosen on the other folds and reported on the held-out one."""

from __future__ import annotations

import pytest

from evaluation.folds import assign_folds, cross_validate
from evaluation.retrieval import per_query_metrics


def _results(scores: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    return {c: {q: {"nDCG@10": v} for q, v in per_q.items()} for c, per_q in scores.items()}


def test_folds_partition_the_questions_evenly_and_reproducibly() -> None:
    ids = [f"q{i}" for i in range(23)]
    folds = assign_folds(ids, 5, seed=3)
    assert set(folds) == set(ids)
    sizes = sorted(list(folds.values()).count(f) for f in range(5))
    assert sizes == [4, 4, 5, 5, 5]
    assert assign_folds(list(reversed(ids)), 5, seed=3) == folds  # order of the input does not matter
    assert assign_folds(ids, 5, seed=4) != folds
    with pytest.raises(ValueError):
        assign_folds(ids, 1)
    with pytest.raises(ValueError):
        assign_folds(ids[:3], 5)


def test_a_setting_that_only_wins_on_the_held_out_fold_is_not_chosen_for_it() -> None:
    # "lucky" is perfect on fold 0's questions and useless elsewhere; "steady" scores 0.6 everywhere.
    ids = [f"q{i}" for i in range(10)]
    fold_of = assign_folds(ids, 2, seed=0)
    lucky = {q: (1.0 if fold_of[q] == 0 else 0.0) for q in ids}
    steady = dict.fromkeys(ids, 0.6)
    cv = cross_validate(_results({"steady": steady, "lucky": lucky}), folds=2, seed=0)
    # Fold 0 is held out: lucky scores 0 on fold 1 (the training part), so steady is chosen for fold 0;
    # for fold 1, lucky is best on fold 0 (1.0 > 0.6) and is chosen, then scores 0 on fold 1.
    assert cv.chosen == ["steady", "lucky"]
    assert cv.tuned["nDCG@10"].per_fold == pytest.approx([0.6, 0.0])
    assert cv.tuned["nDCG@10"].mean == pytest.approx(0.3)
    # Picking the best on all questions would have reported max(0.6, 0.5) = 0.6: the protocol says 0.3.
    assert cv.train["steady"]["nDCG@10"] == pytest.approx(0.6)
    assert cv.train["lucky"]["nDCG@10"] == pytest.approx(0.5)
    assert cv.final_choice == "steady"
    assert cv.fixed["lucky"]["nDCG@10"].per_fold == pytest.approx([1.0, 0.0])
    assert cv.fixed["lucky"]["nDCG@10"].std == pytest.approx(0.7071, abs=1e-4)


def test_ties_go_to_the_candidate_listed_first() -> None:
    ids = [f"q{i}" for i in range(6)]
    same = dict.fromkeys(ids, 0.5)
    cv = cross_validate(_results({"default": same, "other": dict(same)}), folds=3)
    assert cv.chosen == ["default"] * 3
    assert cv.final_choice == "default"


def test_candidates_must_cover_the_same_questions() -> None:
    with pytest.raises(ValueError, match="same questions"):
        cross_validate(_results({"a": {"q1": 1.0, "q2": 1.0}, "b": {"q1": 1.0, "q3": 1.0}}), folds=2)


def test_per_query_metrics_average_to_the_reported_means() -> None:
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1, "d3": 1}, "q3": {"d9": 0}}
    run = {"q1": {"d1": 2.0, "x": 1.0}, "q2": {"x": 3.0, "d3": 2.0}}
    per_q = per_query_metrics(qrels, run, [1])
    assert set(per_q) == {"q1", "q2"}  # q3 has no relevant document
    assert per_q["q1"]["nDCG@10"] == 1.0 and per_q["q1"]["MRR@10"] == 1.0
    assert per_q["q2"]["MRR@10"] == 0.5 and per_q["q2"]["Recall@1"] == 0.0 and per_q["q2"]["Recall@100"] == 0.5


def test_with_a_tolerance_the_cheapest_candidate_close_enough_on_the_training_folds_is_chosen() -> None:
    # Listed cheapest first; "few" costs 0.004 (within 0.005) on fold 1's questions, 0.02 on fold 0's.
    ids = [f"q{i}" for i in range(20)]
    fold_of = assign_folds(ids, 2, seed=1)
    exact = dict.fromkeys(ids, 0.7)
    few = {q: 0.68 if fold_of[q] == 0 else 0.696 for q in ids}
    some = dict.fromkeys(ids, 0.699)
    results = _results({"few": few, "some": some, "exact": exact})
    cv = cross_validate(results, folds=2, seed=1, tolerance=0.005)
    # fold 0 held out: trained on fold 1, where "few" is within 0.005; fold 1 held out: trained on fold 0,
    # where only "some" is
    assert cv.chosen == ["few", "some"]
    assert cv.tuned["nDCG@10"].per_fold == pytest.approx([0.68, 0.699])
    assert cross_validate(results, folds=2, seed=1).chosen == ["exact", "exact"]  # no tolerance: the best
