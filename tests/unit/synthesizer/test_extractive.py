"""Offline answers quote what answers the question, from the paper that answers it."""

from __future__ import annotations

import functools

from services.synthesizer.extractive import ExtractiveAnswerer, stems
from tests.factories import search_hit

hit = functools.partial(search_hit, study_type=None, journal=None, year=None, url=None)

QUESTION = "Do statins reduce the risk of stroke after a transient ischaemic attack?"

OWN = hit(
    "1",
    "BACKGROUND: Transient ischaemic attack often precedes stroke in older adults. "
    "METHODS: We followed 2,000 patients after a transient ischaemic attack for five years. "
    "RESULTS: Patients given statins had a lower risk of stroke than those without statins (hazard ratio 0.7). "
    "Statin therapy after a transient ischaemic attack reduced recurrent stroke by a third.",
)
UNRELATED = hit(
    "2",
    "Propranolol reduced the size of infantile haemangioma in most children treated before six months. "
    "The risk of stroke was not assessed in this trial of children treated with propranolol.",
    rank=2,
)


def test_stemming_matches_inflections() -> None:
    assert stems("statins reduced strokes") == stems("statin reduces stroke")


def test_sentences_come_from_the_paper_that_answers() -> None:
    chosen = ExtractiveAnswerer().select(QUESTION, [OWN, UNRELATED])
    assert chosen, "an answer is expected"
    assert {c.hit.source_id for c in chosen} == {"1"}
    assert any("reduced recurrent stroke" in c.text for c in chosen)
    assert not any("Propranolol" in c.text or "haemangioma" in c.text for c in chosen)


def test_the_anchor_is_the_best_match_not_only_the_first_rank() -> None:
    first = hit("9", "Hospital parking fees rose every year for staff and for visitors alike in the city.")
    own_second = OWN.model_copy(update={"rank": 2})
    chosen = ExtractiveAnswerer().select(QUESTION, [first, own_second])
    assert chosen and {c.hit.source_id for c in chosen} == {"1"}


def test_one_off_source_sentence_only_when_it_adds_a_finding_that_matches_as_well() -> None:
    other = hit(
        "3",
        "In a second cohort, statins reduced the risk of stroke after a transient ischaemic attack by 30 percent.",
        rank=3,
    )
    background = hit(
        "4",
        "Stroke after a transient ischaemic attack is common and statins are widely prescribed in clinics.",
        rank=2,
    )
    third = hit(
        "5",
        "Across two registries, statins reduced the risk of stroke after a transient ischaemic attack by a quarter.",
        rank=4,
    )
    chosen = ExtractiveAnswerer().select(QUESTION, [OWN, background, other, third])
    off = [c for c in chosen if c.hit.source_id != "1"]
    assert len(off) == 1, [c.text for c in chosen]
    assert off[0].hit.source_id in {"3", "5"}  # a finding, never the background sentence
    assert sum(c.hit.source_id == "1" for c in chosen) >= 2
    strict = ExtractiveAnswerer(max_off_source=0).select(QUESTION, [OWN, background, other, third])
    assert {c.hit.source_id for c in strict} == {"1"}


def test_a_weak_match_below_the_floor_is_not_quoted() -> None:
    weak = hit(
        "1",
        OWN.text + " Heart attack registries of the region were consulted for every participant in the study.",
    )
    chosen = ExtractiveAnswerer().select(QUESTION, [weak])
    assert chosen
    assert not any("registries" in c.text for c in chosen)
    assert all(c.score >= chosen[0].score * 0.4 for c in chosen)
