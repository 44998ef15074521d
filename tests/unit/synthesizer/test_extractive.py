"""Offline answers quote what answers the question, from the paper that answers it."""

from __future__ import annotations

import functools

from services.synthesizer.extractive import ExtractiveAnswerer, nearest_source, stems
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


# A passage that repeats one question word ("stroke") ranks first in a hybrid search, while the paper about
# the question as a whole is nearer in meaning (dense score) and holds the sentences that answer it.
LEXICAL_FIRST = hit(
    "7",
    "Stroke risk was higher in winter among patients taking statins after a heart attack. "
    "Stroke nurses recorded the admission times of every patient on the ward. "
    "Results: stroke unit admissions were higher in winter than in summer in every year studied.",
    dense_score=0.52,
)


def test_the_own_source_ranked_second_with_the_best_covering_sentences_is_the_anchor() -> None:
    own_second = OWN.model_copy(update={"rank": 2, "dense_score": 0.71})
    chosen = ExtractiveAnswerer().select(QUESTION, [LEXICAL_FIRST, own_second])
    assert chosen, "an answer is expected"
    assert chosen[0].hit.source_id == "1", [(c.hit.source_id, c.text) for c in chosen]
    assert sum(c.hit.source_id == "1" for c in chosen) >= 2
    assert sum(c.hit.source_id == "7" for c in chosen) <= 1  # at most the one off-source sentence


def test_the_own_source_at_rank_three_is_the_anchor_when_nearest_in_meaning() -> None:
    second = hit("8", "Stroke rehabilitation wards were staffed by physiotherapists on weekdays.", rank=2)
    own_third = OWN.model_copy(update={"rank": 3, "dense_score": 0.9})
    chosen = ExtractiveAnswerer().select(
        QUESTION, [LEXICAL_FIRST, second.model_copy(update={"dense_score": 0.6}), own_third]
    )
    assert chosen and chosen[0].hit.source_id == "1"
    assert sum(c.hit.source_id == "1" for c in chosen) >= 2


def test_a_source_that_covers_the_question_clearly_better_is_not_dropped_for_the_anchor() -> None:
    # The anchor (nearest in meaning) matches the question only partly; a source ranked third states the
    # question's whole topic in a sentence that reports no finding, and a second-ranked one reports a
    # finding that matches less. The covering sentence is quoted, not the weaker finding.
    anchor = hit(
        "1",
        "Results: Patients given statins had a lower risk of admission for a heart attack than those without them.",
        dense_score=0.8,
    )
    weaker_finding = hit(
        "2",
        "Results: Statins lowered the risk of stroke and of heart attack in older adults of a large registry.",
        rank=2,
        dense_score=0.7,
    )
    covering = hit(
        "3",
        "This trial compares statins with placebo for stroke following a transient ischaemic attack in adults.",
        rank=3,
        dense_score=0.75,
    )
    chosen = ExtractiveAnswerer().select(QUESTION, [anchor, weaker_finding, covering])
    sources = [c.hit.source_id for c in chosen]
    assert sources[0] == "1"
    assert "3" in sources, [(c.hit.source_id, c.text) for c in chosen]
    assert "2" not in sources  # one off-source sentence at most, and the stronger one
    # The rule has a threshold: a covering sentence no better than the anchor's is not quoted.
    strict = ExtractiveAnswerer(cover_ratio=10.0).select(QUESTION, [anchor, weaker_finding, covering])
    assert [c.hit.source_id for c in strict] == ["1", "2"]  # the finding rule alone takes the weaker one


def test_when_nothing_clears_the_floor_the_nearest_sources_best_match_is_quoted_alone() -> None:
    question = "Lloyd-Davies position with Trendelenburg: a disaster waiting to happen?"
    near = hit(
        "1",
        "Methods: Calf perfusion was measured in patients during colorectal surgery. "
        "Results: The modified lithotomy position was not associated with a decrease in lower limb perfusion.",
        rank=3,
        dense_score=0.56,
    )
    far = hit(
        "2",
        "Results: Knee gaps were smaller in the everted patella position than in the reduced position.",
        dense_score=0.54,
    )
    chosen = ExtractiveAnswerer().select(question, [far, near])
    assert [c.hit.source_id for c in chosen] == ["1"]
    assert "lithotomy position" in chosen[0].text
    assert ExtractiveAnswerer().select(question, [hit("3", "Hospital parking fees rose for staff in the city.")]) == []


def test_the_nearest_source_follows_the_reranker_then_the_dense_score_then_the_rank() -> None:
    a = hit("1", "x", rank=1, dense_score=0.5)
    b = hit("2", "y", rank=2, dense_score=0.9)
    assert nearest_source([a, b]) == "PMID:2"
    assert nearest_source([a, b.model_copy(update={"dense_score": 0.5})]) == "PMID:1"  # a tie: the better rank
    assert nearest_source([a.model_copy(update={"rerank_score": 0.1}), b]) == "PMID:1"  # reranked: its order
    assert nearest_source([a, b.model_copy(update={"dense_score": None})]) == "PMID:1"  # lexical: the rank
