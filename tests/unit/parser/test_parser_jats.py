"""PMC JATS on every real PMC file in tests/fixtures/pmc: exact expected values."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.parser.chunking import Chunker
from services.parser.core import parse_file
from shared.models import ParsedDocument

PMC = Path(__file__).resolve().parents[2] / "fixtures" / "pmc"

# file -> (pmcid, pmid, doi, title start, authors, abstract labels, pub_date, sections, cited PMIDs)
EXPECTED: dict[str, tuple[str, str, str, str, int, list[str | None], str, int, int]] = {
    "1471-2180-11-174.nxml": ("PMC3166277", "21810267", "10.1186/1471-2180-11-174",
                              "Factors influencing lysis time stochasticity", 2,
                              ["Background", "Results", "Conclusions"], "2011", 21, 56),
    "1472-6831-8-11.nxml": ("PMC2329613", "18405359", "10.1186/1472-6831-8-11",
                            "The Dutch version of the Oral Health Impact Profile", 4,
                            ["Background", "Methods", "Results", "Conclusion"], "2008", 15, 25),
    "6605965a.nxml": ("PMC2994229", "21045829", "10.1038/sj.bjc.6605965",
                      "Oral contraceptives, reproductive history and", 46,
                      ["Background", "Methods", "Results", "Conclusion"], "2010-11", 7, 31),
    "ehp-116-1694.nxml": ("PMC2599765", "19079722", "10.1289/ehp.11570", "Dietary Exposure to 2,2′,4,4′-Tetrabromo", 4,
                          ["Background", "Objective", "Methods", "Results", "Conclusions"], "2008-12", 23, 52),
    "mds526.nxml": ("PMC3574550", "23149571", "10.1093/annonc/mds526", "Socio-demographic inequalities in stage", 7,
                    ["Background", "Patients and methods", "Results", "Conclusions"], "2013-03", 7, 30),
    "pntd.0002065.nxml": ("PMC3585041", "23469300", "10.1371/journal.pntd.0002065",
                          "Serological Evidence of Rift Valley Fever Virus", 6, [None], "2013-02", 15, 21),
    "pone.0000217.nxml": ("PMC1790863", "17299597", "10.1371/journal.pone.0000217",
                          "Quantifying Organismal Complexity using a Population", 4,
                          ["Background", "Methodology", "Conclusions/Significance"], "2007", 22, 26),
    "pone.0046493.nxml": ("PMC3460867", "23029536", "10.1371/journal.pone.0046493",
                          "MmPPOX Inhibits Mycobacterium tuberculosis Lipolytic Enzymes", 9, [None], "2012", 21, 44),
    "efetch_pmc.xml": ("PMC8435807", "34527728", "10.1183/23120541.50193-2021",
                       "“Lung diffusing capacity for nitric oxide", 0, [], "2021-07", 1, 0),
}  # fmt: skip


@pytest.fixture(scope="module")
def parsed(chunker: Chunker) -> dict[str, ParsedDocument]:
    out = {}
    for name in EXPECTED:
        docs = list(parse_file(PMC / name, chunker=chunker))
        assert len(docs) == 1
        out[name] = docs[0]
    return out


def test_every_pmc_fixture_is_covered() -> None:
    assert sorted(p.name for p in PMC.iterdir() if p.suffix in (".nxml", ".xml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_values(name: str, parsed: dict[str, ParsedDocument]) -> None:
    doc = parsed[name]
    pmcid, pmid, doi, title, n_authors, labels, pub_date, n_sections, n_refs = EXPECTED[name]
    assert (doc.source, doc.source_id, doc.pmcid, doc.pmid, doc.doi) == ("pmc", pmcid, pmcid, pmid, doi)
    assert doc.title.startswith(title)
    assert len(doc.authors) == n_authors
    assert [s.label for s in doc.abstract_sections] == labels
    assert doc.pub_date == pub_date and doc.year == int(pub_date[:4])
    assert len(doc.sections) == n_sections
    assert len(doc.references) == n_refs
    assert doc.language == "eng"
    assert doc.chunks


def test_pone_0046493_matches_pubmed_parser(parsed: dict[str, ParsedDocument]) -> None:
    """tests/test_pubmed_oa_parser.py of titipata/pubmed_parser: pmc 3460867, this DOI, PLoS ONE, 2012, 4 figures."""
    doc = parsed["pone.0046493.nxml"]
    assert doc.pmcid == "PMC3460867" and doc.doi == "10.1371/journal.pone.0046493"
    assert doc.journal.title == "PLoS ONE" and doc.year == 2012
    full = doc.full_text or ""
    assert sum(1 for line in full.split("\n") if line.startswith("Figure ")) == 4
    assert doc.abstract and len(doc.abstract) > 0


def test_sections_offsets_and_exclusions(parsed: dict[str, ParsedDocument]) -> None:
    doc = parsed["1471-2180-11-174.nxml"]
    titles = [s.title for s in doc.sections]
    assert titles[:3] == ["Abstract", "Background", "Results"]
    assert "Results > Effect of Host Growth Rates" in titles
    assert "Methods" in titles and "Methods > Statistical analysis" in titles
    assert not any(t in titles for t in ("Competing interests", "Authors' contributions", "Acknowledgements"))
    full = doc.full_text or ""
    methods = doc.sections[titles.index("Methods")]
    assert methods.char_start == methods.char_end  # only subsections
    stats = doc.sections[titles.index("Methods > Statistical analysis")]
    assert full[stats.char_start : stats.char_end].startswith("In most cases, data collection")
    assert full[stats.char_start - len("Statistical analysis\n") : stats.char_start] == "Statistical analysis\n"
    for a, b in zip(doc.sections, doc.sections[1:], strict=False):
        assert a.char_end <= b.char_start  # own-text spans never overlap
    assert "REFERENCES" not in full and "Acknowledgements" not in full


def test_tables_and_figures_as_text(parsed: dict[str, ParsedDocument]) -> None:
    doc = parsed["6605965a.nxml"]
    titles = [s.title for s in doc.sections]
    assert titles == [
        "Abstract",
        "Main text",
        "Materials and Methods",
        "Results",
        "Discussion",
        "Table 1",
        "Table 2",
    ]
    table = doc.sections[5]
    text = (doc.full_text or "")[table.char_start : table.char_end]
    assert text.startswith("Table 1. Participant characteristics at recruitment")
    assert "Mean (s.d.) age at recruitment (years) | 57.4 (8.0) | 50.5 (9.7)" in text
    assert "Among consumers only" in text  # table footnote
    assert doc.keywords == [
        "oral contraceptives",
        "reproductive history",
        "colorectal cancer",
        "cohort study",
    ]
    assert (doc.study_type, doc.evidence_level) == ("cohort", 0.7)  # from its keywords
    assert doc.journal.model_dump() == {
        "title": "British Journal of Cancer", "iso_abbrev": "Br J Cancer", "volume": "103", "issue": "11",
        "pages": "1755-1759",
    }  # fmt: skip
    ehp = parsed["ehp-116-1694.nxml"]
    assert [s.title for s in ehp.sections][-3:] == ["Figure 1", "Figure 2", "Figure 3"]


def test_author_summary_and_affiliations(parsed: dict[str, ParsedDocument]) -> None:
    doc = parsed["pntd.0002065.nxml"]
    assert [s.title for s in doc.sections][:2] == ["Abstract", "Author Summary"]
    first = parsed["pone.0046493.nxml"].authors[0]
    assert (first.last_name, first.fore_name, first.initials) == ("Delorme", "Vincent", "V")
    assert len(first.affiliations) == 2 and first.affiliations[0].startswith("CNRS - Aix-Marseille")


def test_correction_notice(parsed: dict[str, ParsedDocument]) -> None:
    doc = parsed["efetch_pmc.xml"]
    assert doc.publication_types == ["Author Correction"] and doc.retracted is False
    assert [s.title for s in doc.sections] == ["Main text"]
    assert doc.journal.pages == "50193-2021"
