"""Reading the NIH iCite database snapshot (``icite_metadata.csv``) as a stream of citation-metric rows.

The snapshot (figshare collection "iCite Database Snapshots (NIH Open Citation Collection)", one zipped CSV)
has one row per PubMed paper and, among others, the columns ``pmid``, ``doi``, ``title``, ``authors``,
``year``, ``journal``, ``is_research_article``, ``relative_citation_ratio``, ``nih_percentile``, ``human``,
``animal``, ``molecular_cellular``, ``apt``, ``is_clinical``, ``citation_count``, ``citations_per_year``,
``expected_citations_per_year``, ``field_citation_rate``, ``provisional``, ``x_coord``, ``y_coord``,
``cited_by_clin``, ``cited_by`` and ``references`` (the last three: space-separated PMID lists). Columns are
found by name, in any order; those not stored here are ignored. The file is tens of GB: it is read one row at a
time with :mod:`csv` and never held in memory (the loader sends :data:`BATCH_ROWS` rows at a time).

A blank field is NULL. Booleans are read as iCite writes them (``True``/``False`` in the snapshot, ``Yes``/
``No`` from the API's CSV). A row that cannot be read (a PMID that is not a number, a number that is not one,
a count below 0, a percentile outside 0-100, the wrong number of fields) is reported as :class:`BadRow` and
skipped; it does not stop the import. A file without the :data:`REQUIRED_COLUMNS` is refused
(:class:`MissingColumns`) before any row is read.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass

#: Columns a file must have: the PMID and the metrics search filters on and shows.
REQUIRED_COLUMNS: tuple[str, ...] = ("pmid", "citation_count", "relative_citation_ratio", "nih_percentile")
#: Rows sent to PostgreSQL at once (one COPY and one upsert).
BATCH_ROWS = 10_000

_PMID = re.compile(r"^0*([1-9][0-9]{0,18})$")
_TRUE = {"true", "yes", "1", "t", "y"}
_FALSE = {"false", "no", "0", "f", "n"}


class MissingColumns(ValueError):
    """The file's header lacks columns the import needs."""

    def __init__(self, missing: list[str], found: list[str]):
        self.missing = missing
        self.found = found
        shown = ", ".join(found[:30]) or "(no header)"
        super().__init__(f"not an iCite snapshot CSV: missing column(s) {', '.join(missing)}; the header has: {shown}")


@dataclass(frozen=True)
class IciteRow:
    """What the store keeps of one snapshot row (field order = :data:`COLUMNS`)."""

    pmid: str
    year: int | None
    citation_count: int | None
    relative_citation_ratio: float | None
    nih_percentile: float | None
    citations_per_year: float | None
    expected_citations_per_year: float | None
    field_citation_rate: float | None
    apt: float | None
    is_research_article: bool | None
    is_clinical: bool | None
    provisional: bool | None

    def record(self) -> tuple[object, ...]:
        return astuple(self)


#: The stored columns, in :class:`IciteRow` order.
COLUMNS: tuple[str, ...] = tuple(IciteRow.__dataclass_fields__)


@dataclass(frozen=True)
class BadRow:
    """A row that was skipped: its line in the file (1 = the header) and why."""

    line: int
    reason: str


def _blank(text: str | None) -> bool:
    return text is None or not text.strip() or text.strip().lower() in ("nan", "null", "none")


def _float(name: str, text: str | None) -> float | None:
    if _blank(text):
        return None
    assert text is not None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} is not a number: {text.strip()[:40]!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} is not a finite number: {text.strip()[:40]!r}")
    return value


def _int(name: str, text: str | None) -> int | None:
    value = _float(name, text)
    if value is None:
        return None
    if not value.is_integer():
        raise ValueError(f"{name} is not a whole number: {text!r}")
    return int(value)


def _bool(name: str, text: str | None) -> bool | None:
    if _blank(text):
        return None
    assert text is not None
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{name} is not a yes/no value: {text.strip()[:40]!r}")


def parse_row(row: dict[str | None, str | None]) -> IciteRow:
    """One ``csv.DictReader`` row as an :class:`IciteRow`; ValueError (with the reason) when it is malformed."""
    if None in row:
        raise ValueError("more fields than the header has columns")
    if any(v is None for v in row.values()):
        raise ValueError("fewer fields than the header has columns")
    pmid = _PMID.match((row.get("pmid") or "").strip())
    if pmid is None:
        raise ValueError(f"pmid is not a PubMed id: {(row.get('pmid') or '').strip()[:40]!r}")
    count = _int("citation_count", row.get("citation_count"))
    if count is not None and count < 0:
        raise ValueError(f"citation_count is negative: {count}")
    percentile = _float("nih_percentile", row.get("nih_percentile"))
    if percentile is not None and not 0 <= percentile <= 100:
        raise ValueError(f"nih_percentile is outside 0-100: {percentile}")
    year = _int("year", row.get("year"))
    if year is not None and not 1000 <= year <= 9999:
        raise ValueError(f"year is not a year: {year}")
    return IciteRow(
        pmid=pmid.group(1),
        year=year,
        citation_count=count,
        relative_citation_ratio=_float("relative_citation_ratio", row.get("relative_citation_ratio")),
        nih_percentile=percentile,
        citations_per_year=_float("citations_per_year", row.get("citations_per_year")),
        expected_citations_per_year=_float("expected_citations_per_year", row.get("expected_citations_per_year")),
        field_citation_rate=_float("field_citation_rate", row.get("field_citation_rate")),
        apt=_float("apt", row.get("apt")),
        is_research_article=_bool("is_research_article", row.get("is_research_article")),
        is_clinical=_bool("is_clinical", row.get("is_clinical")),
        provisional=_bool("provisional", row.get("provisional")),
    )


def read_icite(lines: Iterable[str]) -> Iterator[IciteRow | BadRow]:
    """The rows of an iCite snapshot CSV (``lines``: an open text file, read lazily), each an :class:`IciteRow`
    or a :class:`BadRow`. Raises :class:`MissingColumns` when the header lacks a required column."""
    # cited_by / references of a much-cited paper run to megabytes: lift csv's 128 KiB field limit.
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.DictReader(lines)
    header = [name.strip() for name in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise MissingColumns(missing, header)
    reader.fieldnames = header
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # e.g. a NUL byte or an unterminated quote
            yield BadRow(reader.line_num, f"unreadable CSV: {exc}")
            continue
        try:
            yield parse_row(row)  # type: ignore[arg-type]
        except ValueError as exc:
            yield BadRow(reader.line_num, str(exc))


def batches(rows: Iterable[IciteRow | BadRow], size: int = BATCH_ROWS) -> Iterator[tuple[list[IciteRow], list[BadRow]]]:
    """``rows`` cut into batches of at most ``size`` good rows (the same PMID twice in a batch: the later row
    wins), each with the bad rows met while filling it."""
    good: dict[str, IciteRow] = {}
    bad: list[BadRow] = []
    for row in rows:
        if isinstance(row, BadRow):
            bad.append(row)
            continue
        good.pop(row.pmid, None)
        good[row.pmid] = row
        if len(good) >= size:
            yield list(good.values()), bad
            good, bad = {}, []
    if good or bad:
        yield list(good.values()), bad
