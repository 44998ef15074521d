"""Bookshelf NXML (hand-made guideline fixture): parts, skipping, hierarchical chunking with title paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.parser.chunking import Chunker
from services.parser.core import parse_content, parse_file
from services.parser.tokens import HfTokenizer
from shared.models import ParsedDocument

BOOKSHELF = Path(__file__).resolve().parents[2] / "fixtures" / "bookshelf"
BOOK = "Guidelines for the treatment of malaria (test edition)"


@pytest.fixture(scope="module")
def docs(chunker: Chunker) -> list[ParsedDocument]:
    return list(parse_file(BOOKSHELF / "malaria-guideline.nxml", chunker=chunker))


def test_parts_and_skipping(docs: list[ParsedDocument]) -> None:
    assert [d.source_id for d in docs] == [f"evidentia-malaria-demo_ch{i}" for i in (1, 2, 3, 4)]
    assert [d.title for d in docs] == [
        "Introduction",
        "Treatment of uncomplicated malaria",
        "Severe malaria",
        "Malaria in pregnancy",
    ]
    for d in docs:
        assert d.source == "bookshelf" and d.journal.title == BOOK
        assert (d.study_type, d.evidence_level, d.pub_date, d.year, d.language) == (
            "guideline",
            0.85,
            "2024-03",
            2024,
            "eng",
        )
        assert d.authors[0].collective_name == "Evidentia Test Guideline Group"
        text = (d.full_text or "") + "".join(c.text for c in d.chunks)
        for sentinel in ("PREFACE", "FOREWORD", "REFERENCE", "ACK", "BACK"):
            assert f"{sentinel}-SENTINEL" not in text
    assert list(parse_file(BOOKSHELF / "fm-preface.nxml")) == []


def test_title_paths(docs: list[ParsedDocument]) -> None:
    pregnancy = docs[3]
    assert [s.title for s in pregnancy.sections] == [
        f"{BOOK} > Malaria in pregnancy",
        f"{BOOK} > Malaria in pregnancy > First trimester of pregnancy",
        f"{BOOK} > Malaria in pregnancy > Second and third trimesters",
        f"{BOOK} > Malaria in pregnancy > Severe malaria in pregnancy",
    ]
    first = [c for c in pregnancy.chunks if c.section and c.section.endswith("First trimester of pregnancy")]
    assert len(first) == 1 and "artemether plus lumefantrine is the recommended treatment" in first[0].text


def test_hierarchical_chunking_with_the_model_cap(docs: list[ParsedDocument]) -> None:
    intro, treatment = docs[0], docs[1]
    # the introduction fits the cap with its subsections: one chunk spanning them
    assert [c.section for c in intro.chunks] == [f"{BOOK} > Introduction"]
    assert "Confirming the diagnosis" in intro.chunks[0].text
    # the treatment chapter does not: its own text, then each subsection; the large leaf is split
    sections = [c.section for c in treatment.chunks]
    act = f"{BOOK} > Treatment of uncomplicated malaria > Artemisinin-based combination therapy"
    assert sections[0] == f"{BOOK} > Treatment of uncomplicated malaria"
    assert sections.count(act) >= 2
    assert any("35 or more | 4 | 6" in c.text for c in treatment.chunks)  # the dosing table, as text


def test_guideline_cap_of_1000_and_smaller_caps(tokenizer: HfTokenizer) -> None:
    data = (BOOKSHELF / "malaria-guideline.nxml").read_bytes()
    roomy = Chunker(tokenizer, max_seq_length=8192)  # a long-context model: the 1,000 setting applies
    docs = parse_content("bookshelf-nxml", data, chunker=roomy)
    assert all(len(d.chunks) == 1 for d in docs)  # every chapter fits 1,000 tokens whole
    tight = Chunker(tokenizer, guideline_tokens=60, max_seq_length=8192)
    docs = parse_content("bookshelf-nxml", data, chunker=tight)
    for d in docs:
        assert all(c.token_count <= 60 for c in d.chunks)
        full = d.full_text or ""
        assert all(full[c.char_start : c.char_end] == c.text for c in d.chunks)


def test_book_part_wrapper_file(chunker: Chunker) -> None:
    (doc,) = parse_file(BOOKSHELF / "diagnosis-chapter.nxml", chunker=chunker)
    assert doc.source_id == "evidentia-malaria-demo_annex1" and doc.title == "Annex 1. Laboratory diagnosis"
    assert doc.pub_date == "2024" and len(doc.sections) == 3


def test_skipped_part_ids_in_content(chunker: Chunker) -> None:
    xml = (BOOKSHELF / "fm-preface.nxml").read_text().replace('id="preface"', 'id="fm-preface"')
    assert parse_content("bookshelf-nxml", xml, chunker=chunker) == []
