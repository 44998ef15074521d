"""One openFDA drug label (a result of ``/drug/label.json``) -> one :class:`~shared.models.ParsedDocument`.

A label is one document: its set id is the ``source_id`` (so a new version of the set replaces the stored
one), its version, effective date and drug (generic, brand and substance names, RxCUIs, pharmacologic classes,
from the label's ``openfda`` block) go in :class:`~shared.models.DrugLabel`, and each clinical section it has
(:data:`SECTIONS`, in the order a label prints them) becomes a section of the full text, so the parser chunks
the label section by section and a search can keep to one section (``Drug interactions``).

openFDA gives every section as a list of strings; this reader is lenient where the data may be odd (a bare
string, non-string items and unknown fields are tolerated, a huge section is cut at
:data:`MAX_SECTION_CHARS`) and strict where identity is at stake: a label without a set id, or with one that is
not a UUID, is refused with :class:`LabelError`.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from shared.models import DrugLabel, ParsedDocument, Section

#: The label fields made into sections, with their titles, in a label's printed order. Older labels have
#: ``warnings`` and ``precautions`` where newer ones have ``warnings_and_cautions``.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("boxed_warning", "Boxed warning"),
    ("indications_and_usage", "Indications and usage"),
    ("dosage_and_administration", "Dosage and administration"),
    ("dosage_forms_and_strengths", "Dosage forms and strengths"),
    ("contraindications", "Contraindications"),
    ("warnings_and_cautions", "Warnings and precautions"),
    ("warnings", "Warnings"),
    ("precautions", "Precautions"),
    ("drug_interactions", "Drug interactions"),
    ("adverse_reactions", "Adverse reactions"),
    ("use_in_specific_populations", "Use in specific populations"),
    ("pregnancy", "Pregnancy"),
    ("mechanism_of_action", "Mechanism of action"),
)

#: The sections a label states interactions in: what the interaction check reads.
INTERACTION_SECTIONS: tuple[str, ...] = ("Drug interactions", "Contraindications", "Boxed warning")

#: A section longer than this is cut (with a note saying so); a label's longest sections run to tens of
#: thousands of characters, so this only stops a runaway field.
MAX_SECTION_CHARS = 200_000
#: The most names (or ids) kept of one kind from a label's ``openfda`` block.
MAX_NAMES = 50

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SPACE = re.compile(r"[ \t\r\f\v]+")
_SEPARATOR = "\n\n"


class LabelError(ValueError):
    """A label that cannot be a document (no usable set id, nothing to read); the message says why."""


def set_id_of(label: Any) -> str:
    """The set id of ``label`` in canonical form (lower case UUID); :class:`LabelError` when it has none."""
    if not isinstance(label, dict):
        raise LabelError(f"a label is a JSON object, not {type(label).__name__}")
    value = label.get("set_id")
    if not isinstance(value, str) or not _UUID.match(value.strip().lower()):
        raise LabelError(f"label without a valid set_id ({str(value)[:60]!r})")
    return value.strip().lower()


def _texts(value: Any) -> list[str]:
    """The strings of a field openFDA gives as a list of strings (a bare string is taken as one)."""
    items = value if isinstance(value, list) else [value]
    return [_clean(v) for v in items if isinstance(v, str) and v.strip()]


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFC", text).replace("\x00", "")
    return "\n".join(_SPACE.sub(" ", line).strip() for line in text.splitlines()).strip()


def _names(block: dict[str, Any], field: str) -> list[str]:
    return list(dict.fromkeys(_texts(block.get(field))))[:MAX_NAMES]


def _version(value: Any) -> int | None:
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    if isinstance(text, str) and text.isdigit():
        return int(text)
    return None


def _date(value: Any) -> tuple[str | None, str | None, int | None]:
    """``(effective_time, pub_date, year)`` of an openFDA ``YYYYMMDD`` date; Nones for anything else."""
    if not isinstance(value, str) or not re.fullmatch(r"(19|20)\d{6}", value.strip()):
        return None, None, None
    v = value.strip()
    return v, f"{v[:4]}-{v[4:6]}-{v[6:]}", int(v[:4])


def _section_text(field: Any) -> str:
    text = "\n".join(_texts(field))
    if len(text) > MAX_SECTION_CHARS:
        text = text[:MAX_SECTION_CHARS].rstrip() + "\n[Section cut: longer than this reader keeps.]"
    return text


def label_document(label: Any) -> ParsedDocument:
    """The document of one openFDA label result; :class:`LabelError` when it has no set id or no section."""
    set_id = set_id_of(label)
    block = label.get("openfda")
    openfda: dict[str, Any] = block if isinstance(block, dict) else {}
    generic, brand = _names(openfda, "generic_name"), _names(openfda, "brand_name")
    effective, pub_date, year = _date(label.get("effective_time"))
    label_id = label.get("id")
    info = DrugLabel(
        version=_version(label.get("version")),
        label_id=label_id.strip() if isinstance(label_id, str) and label_id.strip() else None,
        effective_time=effective,
        generic_names=generic,
        brand_names=brand,
        substance_names=_names(openfda, "substance_name"),
        rxcuis=[r for r in _names(openfda, "rxcui") if r.isdigit()],
        pharm_classes=_names(openfda, "pharm_class_epc"),
    )
    parts: list[str] = []
    sections: list[Section] = []
    length = 0
    for field, title in SECTIONS:
        text = _section_text(label.get(field))
        if not text:
            continue
        if parts:
            parts.append(_SEPARATOR)
            length += len(_SEPARATOR)
        parts.append(text)
        sections.append(Section(title=title, char_start=length, char_end=length + len(text)))
        length += len(text)
    if not sections:
        raise LabelError(f"label {set_id} has none of the sections this reader keeps")
    return ParsedDocument(
        source="fda_label",  # FDA_LABEL.name, as the document model's literal
        source_id=set_id,
        title=label_title(info),
        pub_date=pub_date,
        year=year,
        language="en",
        publication_types=["Drug label"],
        chemicals=[*generic, *[b for b in brand if b not in generic]],
        full_text="".join(parts),
        sections=sections,
        drug_label=info,
    )


def label_title(info: DrugLabel) -> str:
    """``<Brand> (<generic>) drug label``, or what of it the label names."""
    brand = ", ".join(info.brand_names[:3])
    generic = ", ".join(info.generic_names[:3]) or ", ".join(info.substance_names[:3])
    if brand and generic and brand.lower() != generic.lower():
        return f"{brand} ({generic}) drug label"
    return f"{brand or generic or 'Unnamed'} drug label"
