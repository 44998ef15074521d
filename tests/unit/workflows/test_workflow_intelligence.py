"""The pure workflow modules: disease normalisation, search-term expansion, classification, language,
MeSH enhancement, the TTL cache, the drug interaction client and the guideline plan attribution."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.gateway.intelligence.cache import MemoryCache, cache_key, cached
from services.gateway.intelligence.guidelines import attribute
from services.gateway.intelligence.rxnav import NOT_CONFIGURED, RxNavClient
from services.gateway.understanding import language as language_module
from services.gateway.understanding.classify import drug_pair, rule_classify
from services.gateway.understanding.disease import (
    DiseaseNormalizer,
    drug_disease_query,
    is_blocked,
    rule_normalise,
)
from services.gateway.understanding.enhance import QueryEnhancer, expanded_query, mesh_expand
from services.gateway.understanding.expansion import (
    AXIS_CAPS,
    MAX_QUERIES,
    MIN_QUERIES,
    DrugProfile,
    SearchQuery,
    SearchTermExpander,
    enforce_caps,
    rule_organ,
    rule_queries,
)
from services.gateway.understanding.language import detect_language
from shared.models import QueryForm
from tests.fakes.rxnav_server import FakeRxNav
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.workflows.conftest import GUIDELINES, workflow_llm

# --- disease normalisation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("narcolepsy-cataplexy syndrome", "narcolepsy"),
        ("Stage III non-small cell lung cancer", "non-small cell lung cancer"),
        ("type 2 diabetes mellitus", "diabetes mellitus"),
        ("BRCA1-associated breast cancer", "breast cancer"),
        ("Familial hypercholesterolemia", "hypercholesterolemia"),
        ("severe atopic dermatitis", "atopic dermatitis"),
        ("Hepatitis C virus-related hepatocellular carcinoma", "hepatocellular carcinoma"),
        ("Guillain-Barre syndrome", "guillain-barre syndrome"),  # not a disease + qualifier pair: kept whole
        ("obesity", "obesity"),
    ],
)
def test_rules_strip_qualifiers_and_keep_the_organ(raw: str, expected: str) -> None:
    assert rule_normalise(raw) == expected


def test_blocklist_and_query_shape() -> None:
    assert is_blocked("cancer") and is_blocked("Disease OR syndrome") and not is_blocked("lung cancer")
    assert drug_disease_query("bupropion", "obesity OR overweight") == "bupropion AND (obesity OR overweight)"
    assert drug_disease_query("metformin", "polycystic ovary syndrome") == 'metformin AND "polycystic ovary syndrome"'


async def test_normaliser_adds_a_synonym_and_keeps_a_term_with_enough_hits() -> None:
    counts = {"bupropion AND (obesity OR overweight)": 120}
    seen: list[str] = []

    async def count(q: str) -> int | None:
        seen.append(q)
        return counts.get(q, 0)

    n = DiseaseNormalizer(workflow_llm(None), MemoryCache(), count, min_results=3)
    out = await n.normalise("obesity", "bupropion")
    assert (out.search_term, out.count, out.broadened, out.method) == ("obesity OR overweight", 120, False, "rules")
    again = await n.normalise("obesity", "bupropion")  # cached: the count is not asked again
    assert again.method == "cache" and seen == ["bupropion AND (obesity OR overweight)"]


async def test_normaliser_broadens_below_the_minimum_but_never_to_a_blocked_word() -> None:
    counts = {'drugx AND ("non-small cell lung cancer" OR NSCLC)': 1, 'drugx AND "lung cancer"': 40}

    async def count(q: str) -> int | None:
        return counts.get(q, 0)

    normaliser = DiseaseNormalizer(workflow_llm(None), MemoryCache(), count)
    out = await normaliser.normalise("stage IV non-small cell lung cancer", "drugx")
    assert out.broadened and out.search_term == "lung cancer" and out.broader_count == 40


async def test_llm_normalises_and_a_blocked_broader_term_is_refused(fake_llm: WorkflowAnthropic) -> None:
    async def count(q: str) -> int | None:
        return 0  # too few hits: a broader term is asked for; the fake offers "disease" (blocklisted)

    n = DiseaseNormalizer(workflow_llm(fake_llm), MemoryCache(), count)
    out = await n.normalise("narcolepsy-cataplexy syndrome", "sodium oxybate")
    assert out.method == "llm" and out.normalised == "narcolepsy"
    assert out.broader == "disease" and not out.broadened and out.search_term == "narcolepsy"
    assert any("blocklist" in note for note in out.notes)
    assert any(r.body.get("tool_choice", {}).get("name") == "record_disease_term" for r in fake_llm.requests)


async def test_cache_expires_after_its_ttl() -> None:
    now = [1000.0]
    cache = MemoryCache(clock=lambda: now[0])
    calls = []

    async def make() -> int:
        calls.append(1)
        return 7

    assert await cached(cache, "pubmed_count", cache_key("q"), 10, make) == (7, False)
    assert await cached(cache, "pubmed_count", cache_key("q"), 10, make) == (7, True)
    now[0] += 11
    assert await cached(cache, "pubmed_count", cache_key("q"), 10, make) == (7, False)
    assert len(calls) == 2


# --- search-term expansion -------------------------------------------------------------------------------

PROFILE = DrugProfile(
    synonyms=["Wellbutrin", "Zyban", "Aplenzin"],
    target_gene_symbols=["SLC6A3", "SLC6A2", "CHRNA3"],
    mechanisms_of_action=[
        "Dopamine transporter inhibitor",
        "Norepinephrine transporter inhibitor",
        "Nicotinic receptor antagonist",
    ],
    atc_codes=["N06AX12"],
    atc_descriptions=["Other antidepressants"],
    drug_type="small molecule",
)


def test_rules_cover_the_five_axes_within_their_caps() -> None:
    queries = rule_queries("bupropion", "obesity OR overweight", rule_organ("obesity"), PROFILE)
    assert MIN_QUERIES <= len(queries) <= MAX_QUERIES
    axes = [q.axis for q in queries]
    assert set(axes) == {"drug", "class_organ", "mechanism_organ", "target_gene", "synonym"}
    for axis, cap in AXIS_CAPS.items():
        assert axes.count(axis) <= cap
    assert queries[0].query == "bupropion AND (obesity OR overweight)"
    assert 'antidepressants AND "adipose tissue"' in [q.query for q in queries]


def test_without_a_profile_the_drug_axis_pads_to_five() -> None:
    queries = rule_queries("bupropion", "obesity", "adipose tissue", DrugProfile())
    assert len(queries) == MIN_QUERIES and {q.axis for q in queries} == {"drug"}
    assert len({q.query for q in queries}) == MIN_QUERIES


def test_caps_drop_repeats_and_excess() -> None:
    many = [SearchQuery("target_gene", f"G{i} AND x") for i in range(5)] + [SearchQuery("drug", "a AND b")] * 3
    capped = enforce_caps(many)
    assert [q.axis for q in capped].count("target_gene") == AXIS_CAPS["target_gene"]
    assert [q.query for q in capped].count("a AND b") == 1


async def test_llm_expansion_is_capped_and_the_organ_comes_first(fake_llm: WorkflowAnthropic) -> None:
    expander = SearchTermExpander(workflow_llm(fake_llm), MemoryCache())
    out = await expander.expand("sodium oxybate", "narcolepsy", DrugProfile())
    assert out.organ == "brain" and out.organ_method == "llm"
    axes = [q.axis for q in out.queries]
    assert axes.count("drug") == AXIS_CAPS["drug"]  # the fake offers five drug-axis queries: three kept
    assert out.method in ("llm", "llm+rules") and MIN_QUERIES <= len(out.queries) <= MAX_QUERIES
    organ_calls = [
        i for i, r in enumerate(fake_llm.requests) if r.body.get("tool_choice", {}).get("name") == "record_organ_term"
    ]
    term_calls = [
        i for i, r in enumerate(fake_llm.requests) if r.body.get("tool_choice", {}).get("name") == "record_search_terms"
    ]
    assert organ_calls and term_calls and organ_calls[-1] < term_calls[-1]
    cached_out = await expander.expand("sodium oxybate", "narcolepsy", DrugProfile())
    assert cached_out.method == "cache" and cached_out.queries == out.queries


# --- classification and language -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "category"),
    [
        ("Is there an interaction between warfarin and aspirin?", "drug_interaction"),
        ("What do the guidelines recommend for malaria in pregnancy?", "guideline"),
        ("What are the side effects of bupropion?", "drug_information"),
        ("What causes psoriasis?", "disease_information"),
        ("My father has chest pain right now", "emergency"),
        ("Hello there", "other"),
    ],
)
def test_rule_classification(question: str, category: str) -> None:
    assert rule_classify(question).category == category


def test_drug_pair() -> None:
    assert drug_pair("Is there an interaction between warfarin and aspirin?") == ["warfarin", "aspirin"]
    assert drug_pair("Can I take ibuprofen with lisinopril?") == ["ibuprofen", "lisinopril"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Quel est le traitement du paludisme chez la femme enceinte ?", "fr"),
        ("¿Cuál es el tratamiento de la malaria en el embarazo?", "es"),
        ("Welche Nebenwirkungen hat Metformin bei Diabetes?", "de"),
        ("Does metformin help women with polycystic ovary syndrome?", "en"),
        ("Statins after stroke", "en"),
        ("metformin obesity", "en"),
    ],
)
def test_language_detection(text: str, code: str) -> None:
    assert detect_language(text).code == code


@pytest.fixture
def no_langdetect() -> Iterator[None]:
    saved = language_module.HAVE_LANGDETECT
    language_module.HAVE_LANGDETECT = False
    yield
    language_module.HAVE_LANGDETECT = saved


def test_stopword_fallback_without_langdetect(no_langdetect: None) -> None:
    assert detect_language("Quel est le traitement du paludisme chez la femme enceinte ?").code == "fr"
    assert detect_language("What is the treatment of malaria in pregnancy?").code == "en"
    assert detect_language("metformin").method == "default"


# --- enhancement ----------------------------------------------------------------------------------------

VOCAB = {
    "Hydroxymethylglutaryl-CoA Reductase Inhibitors": 5,
    "Stroke": 7,
    "Humans": 100,
    "Dementia": 3,
    "Polycystic Ovary Syndrome": 2,
    "Metformin": 4,
    "Female": 80,
}


def test_mesh_expansion_uses_the_stored_headings() -> None:
    ds = mesh_expand("Do statins reduce dementia risk after a stroke?", VOCAB)
    assert set(ds) == {"Stroke", "Hydroxymethylglutaryl-CoA Reductase Inhibitors", "Dementia"}
    assert "Humans" not in mesh_expand("humans", VOCAB)
    q = expanded_query("Do statins reduce dementia risk after a stroke?", ds)
    assert q.endswith("Hydroxymethylglutaryl-CoA Reductase Inhibitors")
    assert mesh_expand("statins", {"Stroke": 1}) == []  # a heading the corpus lacks is never added


async def test_offline_enhancement_is_honest_about_translation() -> None:
    enhancer = QueryEnhancer(workflow_llm(None), MemoryCache())
    fr = detect_language("Quel est le traitement du paludisme chez la femme enceinte ?")
    out = await enhancer.enhance("Quel est le traitement du paludisme chez la femme enceinte ?", fr, VOCAB)
    assert out.method == "untranslated" and not out.translated and "needs the LLM" in (out.note or "")
    en = detect_language("Do statins reduce dementia risk?")
    out = await enhancer.enhance("Do statins reduce dementia risk?", en, VOCAB)
    assert out.method == "mesh" and "Hydroxymethylglutaryl-CoA Reductase Inhibitors" in out.search_query


async def test_llm_enhancement_translates(fake_llm: WorkflowAnthropic) -> None:
    enhancer = QueryEnhancer(workflow_llm(fake_llm), MemoryCache())
    q = "Quel est le traitement du paludisme chez la femme enceinte ?"
    out = await enhancer.enhance(q, detect_language(q), {})
    assert out.method == "llm" and out.translated
    assert out.english_question == "What is the treatment of malaria in pregnancy?"


# --- drug interactions ----------------------------------------------------------------------------------


async def test_rxnav_unconfigured_says_so() -> None:
    check = await RxNavClient(None).check(["warfarin", "aspirin"])
    assert not check.configured and check.text() == NOT_CONFIGURED


async def test_rxnav_against_the_fake() -> None:
    with FakeRxNav() as fake:
        url = fake.url
        fake.add_drug("warfarin", "11289")
        fake.add_drug("aspirin", "1191")
        fake.add_interaction("11289", "1191", "high", "Aspirin increases the bleeding risk of warfarin.")
        check = await RxNavClient(fake.url).check(["Warfarin", "aspirin", "unobtainium"])
        assert check.resolved == {"warfarin": "11289", "aspirin": "1191"} and check.unresolved == ["unobtainium"]
        assert check.interactions[0].severity == "high"
        assert "bleeding risk" in check.text() and "unobtainium" in check.text()
        fake.fail_status = 503
        failed = await RxNavClient(fake.url).check(["warfarin", "aspirin"])
        assert failed.error and "could not be used" in failed.text()
    down = await RxNavClient(url, timeout_s=2).check(["warfarin", "aspirin"])  # server stopped
    assert down.error is not None and not down.interactions


# --- guidelines -----------------------------------------------------------------------------------------


def test_condition_query_and_attribution() -> None:
    findings = ["symptom: fever 3 days", "medical_history: pregnant first trimester"]
    q = QueryForm.condition_findings("Malaria", findings).text()
    assert q == "Malaria. symptom: fever 3 days. medical_history: pregnant first trimester."
    answer = (
        "Extractive answer (no language model configured): quoted.\n\n"
        "- For a pregnant woman in the first trimester, artemether plus lumefantrine is recommended. "
        "[NBK:NBK999004]"
    )
    [item] = attribute(answer, GUIDELINES)
    assert item.citation_ids == ["NBK:NBK999004"]
    assert item.sections == [GUIDELINES[1].section]
