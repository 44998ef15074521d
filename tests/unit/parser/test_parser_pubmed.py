"""PubMed XML on every real PubMed file in tests/fixtures/pubmed: exact expected values."""

# ruff: noqa: E501  (tables of expected values, one record a line)
from __future__ import annotations

from pathlib import Path

import pytest

from services.parser.chunking import Chunker
from services.parser.core import parse_content, parse_file
from services.parser.pubmed import parse_date_element, parse_medline_date
from shared.models import ParsedDocument

PUBMED = Path(__file__).resolve().parents[2] / "fixtures" / "pubmed"

# file -> [(pmid, title start, authors, mesh headings, abstract labels, pub_date, study_type)]
EXPECTED: dict[str, list[tuple[str, str, int, int, list[str | None], str | None, str]]] = {
    "pubmed1.xml": [
        ("12091962", "The treatment of AIDS behind the walls of correctional facilities.", 1, 19, [], "1990-03", "review"),
        ("9997", "Magnetic studies of Chromatium flavocytochrome C552.", 1, 13, [None], "1976-09-28", "other"),
    ],
    "pubmed2.xml": [
        ("11748933", "Is cryopreservation a homogeneous process?", 8, 11, [None], "2001-06", "other"),
        ("11700088", "Proton MRI of (13)C distribution by J and chemical shift", 6, 0, [None], "2001-11", "other"),
    ],
    "pubmed4.xml": [
        ("27797938", "Leucocyte telomere length, genetic variants at the TERT gene region", 22, 21,
         ["OBJECTIVE", "DESIGN", "RESULTS", "CONCLUSIONS"], "2017-06", "cohort"),
    ],
    "pubmed5.xml": [
        ("28775130", "Occupational pesticide exposure and subclinical hypothyroidism", 12, 0,
         ["OBJECTIVES", "METHODS", "RESULTS", "CONCLUSIONS"], "2018-02", "other"),
    ],
    "pubmed6.xml": [("30108519", 'A "Blood Relationship" Between the Overlooked Minimum', 2, 0, [None], "2018", "other")],
    "pubmed7.xml": [("29963580", "Development of a pulmonary imaging biomarker pipeline", 9, 0, [None], "2018-04", "other")],
    "pubmed-29768149.xml": [
        ("29768149", "Inhaled Combined Budesonide-Formoterol as Needed in Mild Asthma.", 10, 23,
         ["BACKGROUND", "METHODS", "RESULTS", "CONCLUSIONS"], "2018-05-17", "randomized-controlled-trial"),
    ],
    "efetch.pubmed.xml": [
        ("17284678", "Sequencing and analysis of chromosome 1 of Eimeria tenella", 33, 11, [None], "2007-03", "observational"),
        ("9997", "Magnetic studies of Chromatium flavocytochrome C552.", 1, 13, [None], "1976-09-28", "other"),
    ],
    "efetch.pubmedexample.xml": [
        ("17284678", "Sequencing and analysis of chromosome 1 of Eimeria tenella", 2, 11, ["dummy-label"], "2007-03",
         "observational"),
        ("20301295", "GeneReviews", 0, 0, [None], "1993", "other"),
    ],
    "efetch.pubmedbook.xml": [("20301295", "GeneReviews", 0, 0, [None], "1993", "other")],
}  # fmt: skip


@pytest.fixture(scope="module")
def parsed(chunker: Chunker) -> dict[str, list[ParsedDocument]]:
    return {name: list(parse_file(PUBMED / name, chunker=chunker)) for name in EXPECTED}


def test_every_pubmed_fixture_is_covered() -> None:
    assert sorted(p.name for p in PUBMED.glob("*.xml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_values(name: str, parsed: dict[str, list[ParsedDocument]]) -> None:
    docs = parsed[name]
    assert len(docs) == len(EXPECTED[name])
    for doc, (pmid, title, n_authors, n_mesh, labels, pub_date, study_type) in zip(docs, EXPECTED[name], strict=True):
        assert doc.source == "pubmed" and doc.source_id == pmid and doc.pmid == pmid
        assert doc.title.startswith(title)
        assert len(doc.authors) == n_authors
        assert len(doc.mesh) == n_mesh
        assert [s.label for s in doc.abstract_sections] == labels
        assert doc.pub_date == pub_date
        assert doc.year == int(pub_date[:4]) if pub_date else doc.year is None
        assert doc.study_type == study_type
        assert doc.chunks, "every record yields at least one chunk"


def test_29768149_matches_pubmed_parser(parsed: dict[str, list[ParsedDocument]]) -> None:
    """titipata/pubmed_parser tests/test_medline_parser.py documents these MeSH terms for this file."""
    doc = parsed["pubmed-29768149.xml"][0]
    expected = [
        ("Administration, Inhalation", [], False), ("Adolescent", [], False), ("Adult", [], False),
        ("Aged", [], False), ("Asthma", ["drug therapy"], True),
        ("Bronchodilator Agents", ["administration & dosage", "adverse effects"], True),
        ("Budesonide", ["administration & dosage", "adverse effects"], True), ("Child", [], False),
        ("Double-Blind Method", [], False), ("Drug Administration Schedule", [], False),
        ("Drug Combinations", [], False), ("Female", [], False), ("Forced Expiratory Volume", [], False),
        ("Formoterol Fumarate", ["administration & dosage", "adverse effects"], True),
        ("Glucocorticoids", ["administration & dosage"], False), ("Humans", [], False),
        ("Maintenance Chemotherapy", [], False), ("Male", [], False), ("Medication Adherence", [], False),
        ("Middle Aged", [], False), ("Surveys and Questionnaires", [], False),
        ("Terbutaline", ["administration & dosage", "adverse effects"], True), ("Young Adult", [], False),
    ]  # fmt: skip
    assert [(m.descriptor, m.qualifiers, m.major) for m in doc.mesh] == expected
    assert doc.doi == "10.1056/NEJMoa1715274"
    assert doc.journal.model_dump() == {
        "title": "The New England journal of medicine", "iso_abbrev": "N Engl J Med", "volume": "378",
        "issue": "20", "pages": "1865-1876",
    }  # fmt: skip
    assert doc.language == "eng"
    assert doc.evidence_level == 0.9
    assert "Randomized Controlled Trial" in doc.publication_types
    assert doc.chemicals[:3] == ["Bronchodilator Agents", "Drug Combinations", "Glucocorticoids"]
    assert doc.abstract is not None and doc.abstract.startswith("BACKGROUND: ")
    assert doc.abstract_sections[1].category is None  # this record has Label= only
    assert doc.authors[0].last_name == "O'Byrne" and doc.authors[0].initials == "PM"
    assert doc.retracted is False


def test_ids_keywords_references(parsed: dict[str, list[ParsedDocument]]) -> None:
    doc = parsed["pubmed4.xml"][0]
    assert (doc.pmcid, doc.doi) == ("PMC5442267", "10.1136/gutjnl-2016-312510")
    assert doc.keywords == ["PANCREATIC CANCER"]
    assert len(doc.references) == 48 and doc.references[0] == "2657958"
    assert doc.journal.pages == "1116-1122"
    assert doc.authors[0].affiliations[0].startswith("Channing Division of Network Medicine")
    seven = parsed["pubmed7.xml"][0]
    assert seven.keywords[0] == "asthma" and len(seven.references) == 49


def test_book_article(parsed: dict[str, list[ParsedDocument]]) -> None:
    doc = parsed["efetch.pubmedbook.xml"][0]
    assert doc.title == "GeneReviews™" and doc.journal.title == "GeneReviews™"
    assert doc.authors == []  # the record lists editors only
    assert doc.abstract is not None and doc.abstract.startswith("GeneReviews are expert-authored")
    assert doc.language == "eng"


def test_dates() -> None:
    assert parse_medline_date("1998 Dec-1999 Jan") == (1998, 12, None)
    assert parse_medline_date("2000 Spring-Summer") == (2000, 3, None)
    assert parse_medline_date("1975-1976") == (1975, None, None)
    assert parse_medline_date("2001 Jul 15-21") == (2001, 7, 15)
    from lxml import etree

    def el(xml: str) -> etree._Element:
        return etree.fromstring(xml)

    assert parse_date_element(el("<PubDate><MedlineDate>1998 Dec-1999 Jan</MedlineDate></PubDate>")) == (
        "1998-12",
        1998,
    )
    assert parse_date_element(el("<PubDate><Year>2019</Year><Season>Winter</Season></PubDate>")) == (
        "2019-12",
        2019,
    )
    assert parse_date_element(el("<PubDate><Year>2019</Year><Month>02</Month><Day>7</Day></PubDate>")) == (
        "2019-02-07",
        2019,
    )
    assert parse_date_element(el("<PubDate><Year>2019</Year><Month>Feb</Month></PubDate>")) == (
        "2019-02",
        2019,
    )


def test_retraction_status_and_evidence(chunker: Chunker) -> None:
    xml = (PUBMED / "pubmed1.xml").read_text()
    one = xml.replace(
        '<PublicationType UI="D016454">Review</PublicationType>',
        '<PublicationType UI="D016441">Retracted Publication</PublicationType>',
        1,
    )
    docs = parse_content("pubmed-xml", one, chunker=chunker)
    assert docs[0].retracted is True and docs[1].retracted is False
    two = xml.replace(
        "</MedlineCitation>",
        '<CommentsCorrectionsList><CommentsCorrections RefType="RetractionIn"><RefSource>X</RefSource>'
        "<PMID>1</PMID></CommentsCorrections></CommentsCorrectionsList></MedlineCitation>",
        1,
    )
    assert parse_content("pubmed-xml", two, chunker=chunker)[0].retracted is True
    meta = xml.replace(
        '<PublicationType UI="D016454">Review</PublicationType>',
        '<PublicationType UI="D017418">Meta-Analysis</PublicationType>',
        1,
    )
    doc = parse_content("pubmed-xml", meta, chunker=chunker)[0]
    assert (doc.study_type, doc.evidence_level) == ("meta-analysis", 1.0)


def test_pubmed_full_text_layout(parsed: dict[str, list[ParsedDocument]]) -> None:
    doc = parsed["pubmed1.xml"][0]  # no abstract: the title is what gets chunked
    assert doc.abstract is None and [s.title for s in doc.sections] == ["Title"]
    assert doc.chunks[0].text == doc.title
    doc = parsed["pubmed5.xml"][0]
    assert [s.title for s in doc.sections] == ["Abstract"]
    assert [(a.label, a.category) for a in doc.abstract_sections] == [
        ("OBJECTIVES", "OBJECTIVE"),
        ("METHODS", "METHODS"),
        ("RESULTS", "RESULTS"),
        ("CONCLUSIONS", "CONCLUSIONS"),
    ]
    sec = doc.sections[0]
    assert doc.full_text is not None and doc.full_text[sec.char_start : sec.char_end] == doc.abstract


def test_path_type() -> None:
    assert next(iter(parse_file(str(PUBMED / "pubmed6.xml")))).pmid == "30108519"
