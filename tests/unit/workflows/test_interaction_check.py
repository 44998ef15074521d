"""The drug interaction check: RxNorm names (fake RxNav), the stored FDA labels (the fixture labels behind a
store-like search) and the literature; its three verdicts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.gateway.intelligence.interactions import (
    NOT_STORED,
    InteractionChecker,
    class_terms,
    excerpt,
    mention,
)
from services.gateway.intelligence.rxnav import RxNavClient
from shared.events import RetrievalReply, RetrievalRequest
from shared.models import ParsedDocument
from shared.sources.fdalabel_document import label_document
from tests.fakes.openfda_server import load
from tests.fakes.rxnav_server import FakeRxNav
from tests.unit.workflows.conftest import label_hits, pubmed_hit

WARFARIN_SET = "d2a1e8f4-2c3b-4e0a-9a51-6f0c2b7d9e11"
LABELS = [label_document(x) for x in load("labels.json")]


@pytest.fixture
def rxnav() -> Iterator[FakeRxNav]:
    with FakeRxNav() as fake:
        fake.add_drug("warfarin", "11289", brands=["Coumadin", "Jantoven"], classes=["Vitamin K Antagonist"])
        fake.add_drug("fluconazole", "4450", brands=["Diflucan"], classes=["Azole Antifungal"])
        fake.add_drug("amoxicillin", "723", brands=["Amoxil"], classes=["Penicillin-class Antibacterial"])
        fake.add_drug("naproxen", "7258", brands=["Aleve"], classes=["Nonsteroidal Anti-inflammatory Drug"])
        yield fake


class Store:
    """A store-like search: the labels by the ``drugs`` filter and sections, the literature otherwise."""

    def __init__(self, labels: list[ParsedDocument], literature: list[object] | None = None) -> None:
        self.labels = labels
        self.literature = literature or []
        self.requests: list[RetrievalRequest] = []

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        self.requests.append(request)
        if request.filters.sources == ["fda_label"]:
            return RetrievalReply(hits=label_hits(self.labels, request.filters))
        assert "fda_label" not in request.filters.sources and request.filters.sources
        return RetrievalReply(hits=self.literature)  # type: ignore[arg-type]


def checker(rxnav: FakeRxNav | None, store: Store) -> InteractionChecker:
    return InteractionChecker(RxNavClient(rxnav.url if rxnav else None), store.retrieve, trace_id="t")


async def test_a_label_naming_the_other_drug_is_a_finding_with_its_citation(rxnav: FakeRxNav) -> None:
    check = await checker(rxnav, Store(LABELS)).check(["Coumadin", "fluconazole"])
    assert check.status == "found"
    assert [c.rxcui for c in check.concepts] == ["11289", "4450"]
    [finding] = check.findings  # fluconazole's label speaks of coumarin-type anticoagulants, not of warfarin
    assert (finding.label_of, finding.other, finding.term, finding.section) == (
        "coumadin",
        "fluconazole",
        "fluconazole",
        "Drug interactions",
    )
    assert "fluconazole" in finding.excerpt.lower() and len(finding.excerpt) < 600
    assert finding.hit.citation_id == f"FDA:{WARFARIN_SET}"
    assert finding.hit.url == f"https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={WARFARIN_SET}"
    assert set(check.labels_read) == {"coumadin", "fluconazole"} and not check.missing
    text = check.text()
    assert text.startswith("Labelled interactions found:") and "(Drug interactions) names fluconazole" in text
    assert "FDA:" not in text and "http" not in text  # ids and links travel in the findings, not the words
    assert check.sources()[0] is finding.hit


async def test_a_class_named_in_a_label_is_a_finding(rxnav: FakeRxNav) -> None:
    check = await checker(rxnav, Store(LABELS)).check(["warfarin", "naproxen"])
    assert check.status == "found"
    [finding] = check.findings
    assert (finding.label_of, finding.other) == ("warfarin", "naproxen")
    assert finding.term == "nonsteroidal anti-inflammatory drug"  # the label writes the plural
    assert check.missing == ["naproxen"]  # no naproxen label is stored: said
    assert check.missing_reasons == {"naproxen": NOT_STORED}  # no fetch: today's hint
    assert "The FDA label of naproxen was not read: no FDA label is stored" in check.text()


async def test_labels_that_name_neither_drug_are_no_labelled_interaction(rxnav: FakeRxNav) -> None:
    check = await checker(rxnav, Store(LABELS)).check(["warfarin", "amoxicillin"])
    assert check.status == "none_found" and not check.findings
    assert check.labels_read["amoxicillin"] == ["FDA:5c0d9e21-7a4f-4b83-a1d6-2e8f3c9b7a05"]
    assert check.text().startswith("No labelled interaction found") and "not proof" in check.text()


async def test_without_labels_or_a_second_drug_the_check_says_it_could_not(rxnav: FakeRxNav) -> None:
    none_stored = await checker(rxnav, Store([])).check(["warfarin", "fluconazole"])
    assert none_stored.status == "not_checked" and "no FDA label is stored" in none_stored.text()
    assert "Do not assume there is none" in none_stored.text()
    one = await checker(rxnav, Store(LABELS)).check(["warfarin", " Warfarin "])
    assert one.status == "not_checked" and one.reason == "fewer than two drugs were named"


async def test_a_failed_search_is_not_checked_never_none_found(rxnav: FakeRxNav) -> None:
    async def broken(request: RetrievalRequest) -> RetrievalReply:
        raise TimeoutError("retriever down")

    check = await InteractionChecker(RxNavClient(rxnav.url), broken, trace_id="t").check(["warfarin", "fluconazole"])
    assert check.status == "not_checked" and "the search failed (TimeoutError; error id" in check.text()


async def test_without_rxnorm_the_labels_are_read_by_the_names_given(rxnav: FakeRxNav) -> None:
    rxnav.fail_status = 503
    failed = await checker(rxnav, Store(LABELS)).check(["warfarin", "fluconazole"])
    assert failed.status == "found" and "RxNorm could not be reached" in failed.text()
    unset = await checker(None, Store(LABELS)).check(["warfarin", "fluconazole"])
    assert unset.status == "found" and not unset.configured and unset.concepts[0].rxcui is None


async def test_the_strongest_literature_on_the_pair_comes_with_the_result(rxnav: FakeRxNav) -> None:
    weak = pubmed_hit("1", "Warfarin and fluconazole: a case report", "INR rose after fluconazole.", 1, "case-report")
    strong = pubmed_hit("2", "Azoles and warfarin", "In this trial fluconazole raised warfarin INR.", 2)
    strong = strong.model_copy(update={"evidence_level": 0.9})
    off_pair = pubmed_hit("3", "Warfarin dosing", "Warfarin alone.", 3).model_copy(update={"evidence_level": 1.0})
    check = await checker(rxnav, Store(LABELS, [weak, strong, off_pair])).check(["warfarin", "fluconazole"])
    assert [h.pmid for h in check.literature] == ["2", "1"]  # on the pair, strongest first
    assert "Strongest literature evidence: Azoles and warfarin (randomized-controlled-trial)." in check.text()


async def test_rxnav_names_a_misspelt_drug_and_keeps_an_unknown_one(rxnav: FakeRxNav) -> None:
    found = await RxNavClient(rxnav.url).normalise(["warfarine", "Diflucan", "unobtainium"])
    concepts = {c.query: c for c in found.concepts}
    assert concepts["warfarine"].rxcui == "11289" and concepts["warfarine"].name == "warfarin"
    assert concepts["diflucan"].rxcui == "4450" and concepts["diflucan"].classes == ("Azole Antifungal",)
    assert concepts["unobtainium"].rxcui is None and concepts["unobtainium"].names == ["unobtainium"]
    assert concepts["warfarine"].names == ["warfarine", "warfarin", "coumadin", "jantoven"]
    assert any(path == "/REST/approximateTerm.json" for path, _ in rxnav.requests)


def test_mentions_are_whole_words_and_excerpts_are_cut_at_words() -> None:
    assert mention("Aspirin and NSAIDs", ["nsaid"]) == ("nsaid", 12, 18)
    assert mention("warfarinoid", ["warfarin"]) is None
    assert class_terms(("Vitamin K Antagonist [EPC]", " [EPC]")) == ["vitamin k antagonist"]
    text = "word " * 100 + "FLUCONAZOLE" + " word" * 100
    start = text.index("FLUCONAZOLE")
    cut = excerpt(text, start, start + 11, width=20)
    assert cut.startswith("...") and cut.endswith("...") and "FLUCONAZOLE" in cut and "wor " not in cut
