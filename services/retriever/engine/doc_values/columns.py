"""Doc values: the filter columns of every chunk's document, held in the retriever's memory by chunk key.

Under a broad filter (more chunks pass than the filter-first bound) the lexical leg scores every posting and
then checks its best chunks against the filter in SQL, best first, until ``k`` pass. When relevance and the
filter go together the wrong way (a query whose best chunks are from other years than the range asked for)
almost none of the best pass, and the checks grow to thousands of candidates (at 10^6 chunks a year range
are costly; ``docs/benchmarks.md``). With the columns in memory the chunks that fail are
zeroed before the best are picked, as a search engine's doc values or filter bitsets do, and the SQL check then
finds the first ``k`` pass.

What is held, a few bytes a chunk (:data:`BYTES_PER_CHUNK`): the document's year, study type, evidence level,
source, retracted flag, priority and MeSH headings (a set a document, :mod:`.mesh`; a MeSH filter once its
descendants are listed). The journal, citation-metric, section and trial filters are not held: for them every
chunk *may* pass here. This is a pre-filter: :meth:`DocValues.failing` names only chunks that
fail for certain, a chunk it does not know (written after the values were read) may pass, and the SQL check
that follows stays the authority for every filter, so a result is never wrong; the values only save the
checks of chunks that fail. They follow the documents exactly through a change feed
(``follower``), so a chunk that now passes (a retraction withdrawn, a priority raised) is never
dropped for an old value.

The conditions are those of :mod:`~services.retriever.engine.filters.fields` for the held columns, SQL's NULL rules
included (a NULL year fails any year bound); ``tests/integration/test_doc_values_store.py`` checks the two
agree on every chunk for random filters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from services.retriever.engine.doc_values.mesh import EMPTY_SET, MeshSets, SeenSets
from services.retriever.engine.filters.fields import held_passing
from shared.models import SearchFilters

#: A NULL year, study type or source in the arrays (PostgreSQL's NULL fails every comparison; so does this).
NULL_YEAR = np.iinfo(np.int32).min
NULL_CODE = 0

#: What the arrays hold a chunk: year (4), study type (2), evidence level (4), source (1), retracted (1),
#: priority (2), MeSH set (4), known (1); the MeSH sets come on top (4 bytes a descriptor a document).
BYTES_PER_CHUNK = 19


class Codes:
    """Small integer codes for a text column's values (``NULL_CODE`` for NULL), assigned as values appear."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def of(self, values: Sequence[str | None]) -> np.ndarray:
        """The codes of ``values`` (new values get new codes)."""
        out = np.empty(len(values), dtype=np.uint16)
        for i, value in enumerate(values):
            out[i] = NULL_CODE if value is None else self._code(value)
        return out

    def _code(self, value: str) -> int:
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self._codes) + 1
        return code

    def table(self, values: Iterable[str]) -> np.ndarray:
        """A lookup table by code: True for the codes of ``values`` (a value no chunk has had matches nothing;
        NULL matches nothing)."""
        out = np.zeros(len(self._codes) + 1, dtype=bool)
        out[[self._codes[v] for v in values if v in self._codes]] = True
        return out


@dataclass(frozen=True)
class Rows:
    """Filter columns of some chunks, as the store reads them (one entry a chunk)."""

    keys: np.ndarray  # int64
    years: Sequence[int | None]
    study_types: Sequence[str | None]
    evidence_levels: Sequence[float | None]
    sources: Sequence[str]
    retracted: Sequence[bool]
    priorities: Sequence[int]
    mesh: Sequence[Sequence[str]]
    """The document's MeSH descriptors."""

    def __len__(self) -> int:
        return len(self.keys)


#: Verdicts of single conditions over every held chunk kept between searches (any change to the values clears
#: them): the defaults' two (retracted papers, priority 0) that every filtered search applies, a year range or a
#: MeSH filter asked again. At 3x10^6 chunks the defaults' mask took 5.3 ms and "Humans" 11.4 a search; a kept
#: verdict is 3 MB there (48 MB at most).
VERDICTS_KEPT = 16


class DocValues:
    """The held filter columns by chunk key (grown as keys appear); see the module docstring."""

    def __init__(self) -> None:
        self._study = Codes()
        self._source = Codes()
        self.mesh = MeshSets()
        self._verdicts: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._alloc(0)

    def _alloc(self, size: int) -> None:
        self.known = np.zeros(size, dtype=bool)
        self.year = np.full(size, NULL_YEAR, dtype=np.int32)
        self.study_type = np.zeros(size, dtype=np.uint16)
        self.evidence = np.full(size, np.nan, dtype=np.float32)
        self.source = np.zeros(size, dtype=np.uint8)
        self.retracted = np.zeros(size, dtype=bool)
        self.priority = np.zeros(size, dtype=np.int16)
        self.mesh_set = np.full(size, EMPTY_SET, dtype=np.int32)

    def __len__(self) -> int:
        """How many chunk keys are held."""
        return int(self.known.sum())

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.known,
            self.year,
            self.study_type,
            self.evidence,
            self.source,
            self.retracted,
            self.priority,
            self.mesh_set,
        )

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays()) + self.mesh.nbytes

    def reserve(self, size: int) -> None:
        """Room for keys below ``size`` without growing."""
        self._resize(size)

    def _grow(self, size: int) -> None:
        if size > len(self.known):
            self._resize(max(size, 2 * len(self.known)))

    def _resize(self, size: int) -> None:
        if size <= len(self.known):
            return
        self._verdicts.clear()
        old = self._arrays()
        self._alloc(size)
        for new, held in zip(self._arrays(), old, strict=True):
            new[: len(held)] = held

    def put(self, rows: Rows, seen: SeenSets | None = None) -> None:
        """Hold ``rows`` (replacing what was held for their keys); ``seen``: MeSH sets to use again across calls
        (:meth:`MeshSets.add`)."""
        if not len(rows):
            return
        self._verdicts.clear()
        keys = rows.keys
        self._grow(int(keys.max()) + 1)
        self.year[keys] = [NULL_YEAR if y is None else y for y in rows.years]
        self.study_type[keys] = self._study.of(rows.study_types)
        self.evidence[keys] = [np.nan if e is None else e for e in rows.evidence_levels]
        self.source[keys] = self._source.of(rows.sources)
        self.retracted[keys] = rows.retracted
        self.priority[keys] = rows.priorities
        self.mesh_set[keys] = self.mesh.add(rows.mesh, seen)
        self.known[keys] = True

    def may_pass(self, size: int, filters: SearchFilters) -> np.ndarray:
        """For each chunk key below ``size``: False where its chunk fails ``filters`` for certain by the held
        columns, True otherwise (a key not held may pass). Evaluated over the whole arrays (contiguous: at 10^6
        chunks a few milliseconds, where gathering the values of the scored keys took 9-16 ms)."""
        held = min(size, len(self.known))
        ok = self.passing(slice(0, held), filters)
        ok |= self.verdict(("not held",), lambda: ~self.known)[:held]
        if size > held:
            ok = np.concatenate((ok, np.ones(size - held, dtype=bool)))
        return ok

    def verdict(self, condition: tuple[Any, ...], compute: Callable[[], np.ndarray]) -> np.ndarray:
        """``compute()``, a condition's verdict over every held key, kept by ``condition`` until the values change
        (the :data:`VERDICTS_KEPT` most recently used)."""
        kept = self._verdicts.get(condition)
        if kept is None:
            kept = self._verdicts[condition] = compute()
            while len(self._verdicts) > VERDICTS_KEPT:
                self._verdicts.popitem(last=False)
        else:
            self._verdicts.move_to_end(condition)
        return kept

    def passing(self, keys: np.ndarray | slice, filters: SearchFilters) -> np.ndarray:
        """Whether each of ``keys`` (held ones; an index array or a slice) passes the conditions of ``filters``
        that the doc values hold (:func:`~services.retriever.engine.filters.fields.held_passing`)."""
        return held_passing(filters, _HeldKeys(self, keys), len(self.priority[keys]))


class _HeldKeys:
    """The held columns of some keys, compared as SQL compares them (:class:`HeldColumns`)."""

    def __init__(self, values: DocValues, keys: np.ndarray | slice) -> None:
        self._values = values
        self._keys = keys
        # Every key from the first (a search's mask): verdicts over all held keys, kept, then cut to these.
        self._whole = isinstance(keys, slice) and keys.start in (0, None) and keys.step in (1, None)

    def _column(self, column: str, keys: np.ndarray | slice | None = None) -> np.ndarray:
        held: np.ndarray = getattr(self._values, column)[self._keys if keys is None else keys]
        return held

    def _kept(self, condition: tuple[Any, ...], compute: Callable[[np.ndarray | slice], np.ndarray]) -> np.ndarray:
        """``compute(keys)`` for these keys: over every held key and kept (:meth:`DocValues.verdict`) when these
        are a prefix of them."""
        if not self._whole:
            return compute(self._keys)
        whole = self._values.verdict(condition, lambda: compute(slice(None)))
        return whole[self._keys]

    def at_least(self, column: str, value: float) -> np.ndarray:
        def compute(keys: np.ndarray | slice) -> np.ndarray:
            held = self._column(column, keys)
            # real >= real in PostgreSQL: compared in the column's precision; NaN (a NULL evidence level) fails
            ok: np.ndarray = held >= held.dtype.type(value)
            return ok & (held != NULL_YEAR) if column == "year" else ok

        return self._kept(("at_least", column, value), compute)

    def at_most(self, column: str, value: float) -> np.ndarray:
        def compute(keys: np.ndarray | slice) -> np.ndarray:
            held = self._column(column, keys)
            ok: np.ndarray = held <= held.dtype.type(value)
            return ok & (held != NULL_YEAR) if column == "year" else ok

        return self._kept(("at_most", column, value), compute)

    def one_of(self, column: str, values: Sequence[str]) -> np.ndarray:
        codes = self._values._study if column == "study_type" else self._values._source
        table = codes.table(values)

        def compute(keys: np.ndarray | slice) -> np.ndarray:
            found: np.ndarray = table[self._column(column, keys)]
            return found

        return self._kept(("one_of", column, *sorted(values)), compute)

    def is_false(self, column: str) -> np.ndarray:
        return self._kept(("is_false", column), lambda keys: ~self._column(column, keys))

    def any_of(self, column: str, values: Sequence[str]) -> np.ndarray:
        assert column == "mesh", column

        def compute(keys: np.ndarray | slice) -> np.ndarray:
            found: np.ndarray = self._values.mesh.matching(values)[self._column("mesh_set", keys)]
            return found

        return self._kept(("any_of", column, *sorted(set(values))), compute)
