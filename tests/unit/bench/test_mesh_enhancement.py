"""bench/mesh_enhancement.py: the held-out vocabulary leaves out exactly the question's own document, and the
expanded query is the product's offline enhancement."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mesh_enhancement_bench", ROOT / "bench" / "mesh_enhancement.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mesh_enhancement_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_vocabulary_without_one_document_drops_only_its_own_uses() -> None:
    bench = _bench()
    vocabulary = {"Mammography": 1, "Hypertension": 3, "Humans": 2}
    assert bench.vocabulary_without(vocabulary, ["Mammography", "Hypertension", "Not Stored"]) == {
        "Hypertension": 2,
        "Humans": 2,
    }
    assert vocabulary == {"Mammography": 1, "Hypertension": 3, "Humans": 2}  # not changed in place


def test_own_out_expansion_loses_a_descriptor_only_the_own_document_had() -> None:
    bench = _bench()
    questions = {"1": "Does mammography screening reduce mortality in hypertension?"}
    vocabulary = {"Mammography": 1, "Hypertension": 2, "Mortality": 1}
    own = {"1": ["Mammography", "Mortality"]}
    leaky = bench.expanded_queries(questions, vocabulary, own, limit=6, own_out=False)
    held_out = bench.expanded_queries(questions, vocabulary, own, limit=6, own_out=True)
    # Every descriptor the question spells out is matched, but none is added to the query twice.
    assert leaky["1"] == (questions["1"], [])
    assert held_out["1"] == (questions["1"], [])
    lay = {"2": "Do statins prevent a heart attack?"}
    vocab2 = {"Myocardial Infarction": 4, "Hydroxymethylglutaryl-CoA Reductase Inhibitors": 1}
    own2 = {"2": ["Hydroxymethylglutaryl-CoA Reductase Inhibitors"]}
    query, added = bench.expanded_queries(lay, vocab2, own2, limit=6, own_out=False)["2"]
    assert added == ["Myocardial Infarction", "Hydroxymethylglutaryl-CoA Reductase Inhibitors"]
    assert query == f"{lay['2']} Myocardial Infarction Hydroxymethylglutaryl-CoA Reductase Inhibitors"
    query, added = bench.expanded_queries(lay, vocab2, own2, limit=6, own_out=True)["2"]
    assert added == ["Myocardial Infarction"]
    assert query == f"{lay['2']} Myocardial Infarction"
    assert bench.expanded_queries(lay, vocab2, own2, limit=1, own_out=False)["2"][1] == ["Myocardial Infarction"]


def test_split_is_the_extractive_benchmarks_halves() -> None:
    bench = _bench()
    ids = [str(i) for i in range(40)]
    split = bench.split_of(ids, 0)
    assert sorted(set(split.values())) == ["report", "tune"]
    assert sum(v == "tune" for v in split.values()) == 20
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("extractive_bench", ROOT / "bench" / "extractive_pubmedqa.py")
    assert spec is not None and spec.loader is not None
    extractive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extractive)
    assert extractive.split_of(ids, 0) == split


def test_paired_interval_brackets_a_constant_difference_and_excludes_zero_for_a_clear_gain() -> None:
    bench = _bench()
    assert bench.paired_interval([0.1] * 30) == pytest.approx((0.1, 0.1))
    low, high = bench.paired_interval([0.0, 0.2, 0.1, 0.3, 0.2, 0.1] * 10)
    assert 0.0 < low < 0.15 < high
    assert bench.paired_interval([]) == (0.0, 0.0)


def test_a_corpus_without_mesh_headings_leaves_every_question_as_asked() -> None:
    """SciFact (BEIR) documents carry no MeSH headings: the stored vocabulary is empty and the enhancement a no-op."""
    bench = _bench()
    from evaluation.retrieval import Dataset, to_documents

    ds = Dataset(
        "beir", {"d1": ("Statins", "Statins lower cholesterol.")}, {"q1": "Do statins prevent a heart attack?"}, {}
    )
    assert [d.mesh for d in to_documents(ds)] == [[]]
    assert bench.expanded_queries(ds.queries, {}, ds.mesh, limit=6, own_out=False) == {"q1": (ds.queries["q1"], [])}


def test_the_limit_is_chosen_on_tune_and_a_tie_goes_to_the_products_limit() -> None:
    bench = _bench()
    per_q: dict[str, dict[str, dict[str, float]]] = {"as asked": {}, "mesh top1": {}, "mesh top6": {}}
    ids = [str(i) for i in range(20)]
    split = bench.split_of(ids, 0)
    for q in ids:
        tune = split[q] == "tune"
        per_q["as asked"][q] = dict.fromkeys(bench.METRICS, 0.5)
        per_q["mesh top1"][q] = dict.fromkeys(bench.METRICS, 0.5)
        per_q["mesh top6"][q] = dict.fromkeys(bench.METRICS, 0.5)
        if not tune:  # better on the held-out half only: must not be chosen for it
            per_q["mesh top1"][q] = dict.fromkeys(bench.METRICS, 1.0)
    results = {"variants": per_q, "added": {"mesh top1": {}, "mesh top6": {}}}
    summary = bench.summarise(results, 0)
    assert summary["chosen_on_tune"] == {"mesh top": "mesh top6"}
    assert summary["held_out_vs_as_asked"]["mesh top1"]["nDCG@10"]["delta"] == 0.5
    assert summary["held_out_vs_as_asked"]["mesh top1"]["better"] == 10
    # The fold protocol over the same figures: a tie on the training folds keeps the question as asked.
    cv = summary["cross_validation"]
    assert cv["folds"] == 5 and len(cv["chosen_per_fold"]) == 5
    assert cv["tuned_heldout"]["nDCG@10"]["mean"] <= 1.0
    for q in ids:
        if split[q] == "tune":
            per_q["mesh top1"][q] = dict.fromkeys(bench.METRICS, 0.6)
    assert bench.summarise(results, 0)["chosen_on_tune"] == {"mesh top": "mesh top1"}
