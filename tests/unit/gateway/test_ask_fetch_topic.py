"""``fetch: auto``'s on-topic test and the offline PubMed query shaped by the query intelligence's rules: a store
of other topics that clears the relevance floor still searches PubMed; a store that holds the topic does not;
disease and lay names searched with their synonyms and MeSH descriptors, staging qualifiers left out."""

from __future__ import annotations

from services.gateway.livefetch.plan import MIN_SOURCES, relevant_sources, should_search
from services.gateway.livefetch.query import (
    Concept,
    pubmed_query,
    question_concepts,
    question_terms,
    relaxed_queries,
)
from services.gateway.livefetch.topic import coverage, on_topic_sources, text_stems
from services.gateway.understanding.disease import SYNONYMS, is_staging_qualifier
from services.gateway.understanding.enhance import LAY_TO_MESH
from tests.unit.gateway.conftest import hit

FLOOR = 0.61
QUESTION = "Does vitamin D supplementation prevent hip fractures in elderly women?"
ON_TOPIC = [
    "Vitamin D supplementation reduced hip fracture incidence among elderly women in care homes.",
    "In elderly women, daily vitamin D supplementation did not prevent fractures of the hip.",
    "Supplementation with vitamin D and calcium prevented hip fractures in older women.",
]
OFF_TOPIC = [
    "Telephone counseling increased mammography screening among nonadherent women.",
    "Statin therapy lowered LDL cholesterol in elderly patients with diabetes.",
    "Reminder letters did not change screening rates among elderly women.",
]


def hits(texts: list[str], dense: float = 0.8) -> list:  # type: ignore[type-arg]
    return [hit(str(100 + i), t, i + 1, dense_score=dense, title="A study") for i, t in enumerate(texts)]


# --- auto's trigger ---------------------------------------------------------------------------------------


def test_an_off_topic_store_that_clears_the_floor_still_searches_pubmed() -> None:
    concepts = question_concepts(QUESTION)
    stored = hits(OFF_TOPIC)
    assert relevant_sources(stored, FLOOR) == MIN_SOURCES  # the floor alone would answer from the store
    assert on_topic_sources(stored, concepts) == 0
    wanted, why = should_search("auto", stored, FLOOR, concepts)
    assert wanted
    assert f"{MIN_SOURCES} stored sources clear the relevance floor but only 0 cover" in why


def test_a_store_that_holds_the_topic_answers_without_searching() -> None:
    concepts = question_concepts(QUESTION)
    stored = hits(ON_TOPIC)
    assert on_topic_sources(stored, concepts) == MIN_SOURCES
    wanted, why = should_search("auto", stored, FLOOR, concepts)
    assert not wanted and f"{MIN_SOURCES} stored sources are on topic" in why
    # Two on topic and one off: too few to skip PubMed.
    assert should_search("auto", hits([*ON_TOPIC[:2], OFF_TOPIC[0]]), FLOOR, concepts)[0] is True


def test_a_source_on_topic_must_also_clear_the_floor() -> None:
    concepts = question_concepts(QUESTION)
    assert should_search("auto", hits(ON_TOPIC, dense=0.3), FLOOR, concepts)[0] is True


def test_coverage_meets_word_forms_synonyms_and_counts_a_source_s_passages_together() -> None:
    concepts = [Concept("fractures"), Concept("heart attack", ("myocardial infarction",))]
    assert coverage(concepts, text_stems(["A fracture after a myocardial infarction."])) == 1.0
    assert coverage(concepts, text_stems(["A fracture after heart surgery."])) == 0.5  # every word of a name
    assert coverage([], text_stems(["anything"])) == 1.0  # nothing to judge: the floor alone decides
    split = [
        hit("7", "Vitamin D supplementation in elderly women.", 1, dense_score=0.8, title="A trial"),
        hit("7", "Hip fractures were prevented.", 2, chunk_suffix="#h#1", dense_score=0.8, title="A trial"),
    ]
    assert on_topic_sources(split, question_concepts(QUESTION)) == 1  # one source, its passages together
    assert on_topic_sources(split[:1], question_concepts(QUESTION)) == 0  # 4 of 7 concepts: under the share
    assert on_topic_sources(split[1:], question_concepts(QUESTION)) == 0  # 3 of 7


# --- the query --------------------------------------------------------------------------------------------


def test_a_known_disease_name_is_one_term_with_its_synonym_and_mesh_descriptor() -> None:
    concepts = question_concepts("Do statins reduce the risk of heart attack in type 2 diabetes?")
    by_text = {c.text: c for c in concepts}
    assert by_text["heart attack"].synonyms == (SYNONYMS["heart attack"],)
    assert by_text["type 2 diabetes"].mesh == LAY_TO_MESH["type 2 diabetes"][:1]
    assert by_text["statins"].mesh == LAY_TO_MESH["statins"][:1]
    assert "attack" not in by_text and "diabetes" not in by_text  # the name is one concept, not its words
    terms = question_terms("Do statins reduce the risk of heart attack in type 2 diabetes?")
    assert terms[3] == '("heart attack" OR "myocardial infarction")'
    assert terms[4] == '("type 2 diabetes" OR "Diabetes Mellitus, Type 2"[mesh])'
    assert pubmed_query(terms[3:5]) == f"{terms[3]} AND {terms[4]}"


def test_staging_and_severity_qualifiers_are_left_out_of_the_search() -> None:
    assert is_staging_qualifier("severe") and is_staging_qualifier("metastatic")
    assert not is_staging_qualifier("women")
    terms = question_terms("Does exercise help patients with severe metastatic breast cancer?")
    assert "severe" not in terms and "metastatic" not in terms
    assert '("breast cancer" OR "breast neoplasms")' in terms


def test_a_shaped_query_that_finds_nothing_is_still_relaxed() -> None:
    terms = question_terms("Is severe atopic dermatitis linked to heart attack in smokers?")
    tried = relaxed_queries(terms)
    assert tried[0] == pubmed_query(terms)
    assert tried[1] == pubmed_query(terms[:-1])
    assert tried[-1] == pubmed_query(terms[: (len(terms) + 1) // 2])
    assert all('("atopic dermatitis" OR eczema)' in q for q in tried)  # the first concept is kept
