"""Evidence levels 1-5 on the stored evidence weights, and the strongest-evidence-first order of sources
(shared/models.py)."""

from __future__ import annotations

import numpy as np
import pytest

from shared.models import (
    EVIDENCE_WEIGHTS,
    NEUTRAL_EVIDENCE_WEIGHT,
    SearchFilters,
    StudyType,
    evidence_level_of,
    evidence_level_weight,
    strongest_evidence_first,
)
from tests.factories import search_hit

LEVEL_OF_TYPE: dict[StudyType, int] = {
    "meta-analysis": 1,
    "systematic-review": 1,
    "randomized-controlled-trial": 2,
    "guideline": 3,
    "clinical-trial": 3,
    "cohort": 3,
    "case-control": 3,
    "observational": 3,
    "case-report": 4,
    "other": 4,
    "review": 5,
    "editorial": 5,
}


def test_every_study_type_has_its_level() -> None:
    assert set(LEVEL_OF_TYPE) == set(EVIDENCE_WEIGHTS)
    assert {t: evidence_level_of(w) for t, w in EVIDENCE_WEIGHTS.items()} == LEVEL_OF_TYPE


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_at_least_level_n_admits_exactly_the_types_of_levels_1_to_n(level: int) -> None:
    low = evidence_level_weight(level)
    SearchFilters(min_evidence_level=low)  # a valid search filter
    admitted = {t for t, w in EVIDENCE_WEIGHTS.items() if w >= low}
    assert admitted == {t for t, lv in LEVEL_OF_TYPE.items() if lv <= level}


def test_levels_outside_1_to_5_are_refused_and_unknown_weight_is_neutral() -> None:
    for bad in (0, 6, -1):
        with pytest.raises(ValueError, match="1 \\(strongest\\) to 5"):
            evidence_level_weight(bad)
    assert NEUTRAL_EVIDENCE_WEIGHT == EVIDENCE_WEIGHTS["other"] == 0.5
    assert evidence_level_of(None) == 4
    # As the store's `real` column gives them back.
    assert [evidence_level_of(float(np.float32(w))) for w in (1.0, 0.9, 0.7, 0.5, 0.3)] == [1, 2, 3, 4, 5]


def test_sources_are_listed_strongest_evidence_first_then_by_rank() -> None:
    hits = [
        search_hit("1", "a", 1).model_copy(update={"evidence_level": 0.3}),
        search_hit("2", "b", 2).model_copy(update={"evidence_level": None}),
        search_hit("3", "c", 3).model_copy(update={"evidence_level": 0.9}),
        search_hit("4", "d", 4).model_copy(update={"evidence_level": 1.0}),
        search_hit("5", "e", 5).model_copy(update={"evidence_level": 0.9}),
    ]
    out = strongest_evidence_first(hits)
    assert [h.pmid for h in out] == ["4", "3", "5", "2", "1"]
    assert [h.rank for h in out] == [4, 3, 5, 2, 1]  # each keeps its retrieval rank
    assert strongest_evidence_first([]) == []
