"""The MeSH headings of the doc values: every chunk's document's descriptors, so that a MeSH filter drops the
chunks that fail it before the lexical leg checks its best candidates in SQL.

A MeSH filter is the one filter whose share of passing chunks says least about a query's best chunks: "Humans"
passes ~95 % of a PubMed corpus, but a question about mouse models finds its best chunks among the 5 % it
fails. Checked in SQL, best first, such a search read 14,469 candidates at 10^6 chunks (242 ms) and ~1.6 s at
3x10^6 (``docs/benchmarks.md``). Held here, the failing chunks are zeroed as a search engine's filter
postings would.

Documents share their headings among their chunks, so the headings are held as *sets*: a chunk holds the id of
its document's set (4 bytes), a set its descriptors' codes (4 bytes each). A set is written once for each distinct
list of headings while everything is read (within one read of changes after that) and never changed; a changed
document's chunks get a new set, the old one stays unused until everything is read again. A filter is
answered per set (which sets hold any of its descriptors, from the descriptors' lists of sets), then per chunk
by its set: at 3x10^6 chunks a gather of 3 M entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

#: The set of no descriptors (a document without headings, or a chunk not held): it matches no filter.
EMPTY_SET = 0

#: Sets seen while reading rows, by a hash of their headings: the set id and a second hash.
SeenSets = dict[int, tuple[int, int]]

_SEPARATOR = "\x1f"  # the unit separator: no descriptor holds it

#: Sets added since the descriptors' lists of sets were built are answered by scanning their codes; past this
#: many (or an eighth of those listed) the lists are due to be built again (:attr:`MeshSets.stale`; the
#: follower builds them on a thread, ~1-2 s for a few million documents' headings).
RELIST_AFTER = 4_096


@dataclass(frozen=True)
class _Lists:
    """Each descriptor's list of the sets holding it, over the first ``listed`` sets: code ``c``'s sets are
    ``sets[starts[c]:starts[c + 1]]``. Replaced whole (a search on the event loop reads one while the next is
    built on a thread)."""

    listed: int
    starts: np.ndarray
    sets: np.ndarray


class _Buffer:
    """A growable one-dimensional array (capacity doubling)."""

    def __init__(self, dtype: type[np.generic], initial: Sequence[int] = ()) -> None:
        self._data = np.zeros(max(16, len(initial)), dtype=dtype)
        self._size = 0
        self.extend(np.asarray(initial, dtype=dtype))

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.zeros(max(end, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = values
        self._size = end

    @property
    def view(self) -> np.ndarray:
        return self._data[: self._size]

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)


class MeshSets:
    """Sets of MeSH descriptors (codes), by set id; see the module docstring."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._starts = _Buffer(np.int64, [0, 0])  # set i's codes: entries[starts[i]:starts[i + 1]]; set 0 empty
        self._entries = _Buffer(np.int32)
        self._lists = _Lists(0, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32))

    def __len__(self) -> int:
        """How many sets are held (the empty one included)."""
        return len(self._starts.view) - 1

    @property
    def nbytes(self) -> int:
        return self._starts.nbytes + self._entries.nbytes + self._lists.starts.nbytes + self._lists.sets.nbytes

    @property
    def stale(self) -> bool:
        """Whether enough sets were added since the descriptors' lists were built to build them again."""
        listed = self._lists.listed
        return len(self) - listed > max(RELIST_AFTER, listed // 8)

    def add(self, headings: Iterable[Sequence[str]], seen: SeenSets | None = None) -> np.ndarray:
        """The set id of each row's ``headings`` (the empty set for none): a set seen before in ``seen`` (one
        call's rows when None) is used again, a new one is added."""
        seen = {} if seen is None else seen
        ids: list[int] = []
        starts: list[int] = []
        entries: list[int] = []
        end = len(self._entries.view)
        base = len(self)  # the first new set's id
        code_of = self._codes.get
        for terms in headings:
            if not terms:
                ids.append(EMPTY_SET)
                continue
            key = tuple(terms)
            # Two independent 64-bit hashes name a set, the tuple's (from its strings' hashes) and its joined
            # text's: holding the tuples themselves would keep every document's strings while everything is
            # read (~200 bytes a document).
            first, second = hash(key), hash(_SEPARATOR.join(key))
            known = seen.get(first)
            if known is not None and known[1] == second:
                ids.append(known[0])
                continue
            found = [code_of(term) for term in key]
            codes = [self._code(term) for term in key] if None in found else cast("list[int]", found)
            unique = sorted(set(codes))
            entries.extend(unique)
            end += len(unique)
            ids.append(base + len(starts))
            starts.append(end)
            seen[first] = (ids[-1], second)
        self._entries.extend(np.asarray(entries, dtype=np.int32))
        self._starts.extend(np.asarray(starts, dtype=np.int64))
        return np.asarray(ids, dtype=np.int32)

    def _code(self, term: str) -> int:
        code = self._codes.get(term)
        if code is None:
            code = self._codes[term] = len(self._codes)
        return code

    def matching(self, descriptors: Sequence[str]) -> np.ndarray:
        """For each set id: whether the set holds any of ``descriptors`` (compared exactly, as SQL's ``&&``
        compares text; a descriptor no set holds matches nothing)."""
        codes = sorted({code for d in descriptors if (code := self._codes.get(d)) is not None})
        out = np.zeros(len(self), dtype=bool)
        if not codes:
            return out
        lists = self._lists
        for code in codes:
            if code + 1 < len(lists.starts):
                out[lists.sets[lists.starts[code] : lists.starts[code + 1]]] = True
        if lists.listed < len(out):  # sets added since the lists were built: their codes scanned
            table = np.zeros(len(self._codes), dtype=bool)
            table[codes] = True
            bounds = self._starts.view[lists.listed : len(out) + 1]
            hits = np.concatenate(([0], np.cumsum(table[self._entries.view[bounds[0] : bounds[-1]]])))
            rel = bounds - bounds[0]
            out[lists.listed :] = hits[rel[1:]] > hits[rel[:-1]]
        return out

    def relist(self) -> None:
        """Build each descriptor's list of the sets holding it, over every set held now (after reading everything,
        and when :attr:`stale`; safe on a thread while searches read the lists, not while sets are added)."""
        starts = self._starts.view
        count = len(starts) - 1
        entries = self._entries.view[: starts[-1]]
        owner = np.repeat(np.arange(count, dtype=np.int32), np.diff(starts))
        order = np.argsort(entries, kind="stable")
        counts = np.bincount(entries, minlength=len(self._codes))
        self._lists = _Lists(count, np.concatenate(([0], np.cumsum(counts))).astype(np.int64), owner[order])
