"""The openFDA drug label reader: one document per label set, sections in label order, identity kept; lenient
with odd values, strict about the set id."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.sources.fdalabel import FDA_LABEL
from shared.sources.fdalabel_document import (
    INTERACTION_SECTIONS,
    MAX_NAMES,
    MAX_SECTION_CHARS,
    SECTIONS,
    LabelError,
    label_document,
)
from tests.fakes.openfda_server import load

WARFARIN_SET = "d2a1e8f4-2c3b-4e0a-9a51-6f0c2b7d9e11"


def _warfarin() -> dict[str, Any]:
    return copy.deepcopy(next(x for x in load("labels.json") if x["set_id"] == WARFARIN_SET))


def _section(doc: Any, title: str) -> str:
    sec = next(s for s in doc.sections if s.title == title)
    return str(doc.full_text[sec.char_start : sec.char_end])


def test_a_label_is_one_document_with_its_sections_in_label_order() -> None:
    label = _warfarin()
    doc = label_document(label)
    assert doc.source == FDA_LABEL.name and doc.source_id == WARFARIN_SET
    assert doc.document_id == f"fda_label:{WARFARIN_SET}"
    order = [title for field, title in SECTIONS if field in label]
    assert [s.title for s in doc.sections] == order
    assert _section(doc, "Drug interactions") == label["drug_interactions"][0]
    assert "<table>" not in (doc.full_text or "")  # the HTML tables stay out
    info = doc.drug_label
    assert info is not None
    assert (info.version, info.effective_time, info.label_id) == (12, "20240315", label["id"])
    assert info.rxcuis == label["openfda"]["rxcui"]
    assert info.pharm_classes == ["Vitamin K Antagonist [EPC]"]
    assert {"warfarin sodium", "855288"} <= set(info.match_terms)
    assert (doc.year, doc.pub_date) == (2024, "2024-03-15")
    assert doc.url == f"https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={WARFARIN_SET}"


def test_a_new_version_changes_the_content_hash_but_not_the_id() -> None:
    old = label_document(_warfarin())
    new = label_document(load("warfarin-v13.json")[0])
    assert new.document_id == old.document_id
    assert new.content_hash() != old.content_hash()
    assert new.drug_label is not None and new.drug_label.version == 13


def test_missing_sections_are_left_out_and_none_at_all_is_refused() -> None:
    label = _warfarin()
    for field in ("boxed_warning", "drug_interactions", "contraindications"):
        del label[field]
    doc = label_document(label)
    assert not set(INTERACTION_SECTIONS) & {s.title for s in doc.sections}
    bare = {"set_id": WARFARIN_SET, "openfda": label["openfda"]}
    with pytest.raises(LabelError, match="none of the sections"):
        label_document(bare)


@pytest.mark.parametrize("set_id", [None, "", 42, ["d2a1e8f4-2c3b-4e0a-9a51-6f0c2b7d9e11"], "../../etc", "x" * 36])
def test_a_label_without_a_valid_set_id_is_refused(set_id: object) -> None:
    label = _warfarin()
    label["set_id"] = set_id
    with pytest.raises(LabelError, match="set_id"):
        label_document(label)


@pytest.mark.parametrize("label", [None, [], "label", 3])
def test_a_label_that_is_not_an_object_is_refused(label: object) -> None:
    with pytest.raises(LabelError):
        label_document(label)


def test_wrong_types_are_tolerated_where_they_do_no_harm() -> None:
    label = _warfarin()
    label["drug_interactions"] = "A bare string instead of a list."  # taken as one text
    label["contraindications"] = [None, 3, {"x": 1}, "  Kept.  "]  # only the strings
    label["adverse_reactions"] = {"not": "a list"}  # no text: left out
    label["version"] = "v12"  # not a number: no version
    label["effective_time"] = 20240315  # not a string: no date
    label["openfda"] = {"generic_name": "WARFARIN", "rxcui": ["855288", "not-an-id", 7], "brand_name": [None]}
    doc = label_document(label)
    assert _section(doc, "Drug interactions") == "A bare string instead of a list."
    assert _section(doc, "Contraindications") == "Kept."
    assert "Adverse reactions" not in {s.title for s in doc.sections}
    info = doc.drug_label
    assert info is not None and info.version is None and info.effective_time is None and doc.year is None
    assert info.generic_names == ["WARFARIN"] and info.rxcuis == ["855288"] and info.brand_names == []
    label["openfda"] = "not an object"
    assert label_document(label).drug_label.generic_names == []  # type: ignore[union-attr]


def test_huge_fields_are_cut() -> None:
    label = _warfarin()
    label["adverse_reactions"] = ["bleeding " * (MAX_SECTION_CHARS // 4)]
    label["openfda"]["brand_name"] = [f"Brand {i}" for i in range(MAX_NAMES * 3)]
    doc = label_document(label)
    text = _section(doc, "Adverse reactions")
    assert len(text) < MAX_SECTION_CHARS + 100 and text.endswith("[Section cut: longer than this reader keeps.]")
    assert doc.drug_label is not None and len(doc.drug_label.brand_names) == MAX_NAMES


def test_control_characters_and_odd_spacing_are_cleaned() -> None:
    label = _warfarin()
    label["drug_interactions"] = ["7 DRUG\x00 INTERACTIONS \t\t Aspirin   increases\r\nbleeding."]
    assert _section(label_document(label), "Drug interactions") == "7 DRUG INTERACTIONS Aspirin increases\nbleeding."
