"""Doc values (engine/doc_values/columns.py, mesh.py): what a held chunk passes, with SQL's NULL rules; keys not
held may pass; the arrays grow as keys appear; MeSH headings held as sets a document, answered alike from the
descriptors' lists of sets and from sets added since. Agreement with the SQL filter on a real store is checked in
tests/integration/test_doc_values_store.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import numpy as np
import pytest

from services.retriever.engine.doc_values import mesh
from services.retriever.engine.doc_values.columns import DocValues, Rows
from services.retriever.engine.doc_values.follower import RETRY_LOAD_AFTER_S, DocValuesFollower, prune_forever
from services.retriever.engine.filters.fields import holds_all, narrows
from shared.models import SearchFilters


def _values() -> DocValues:
    values = DocValues()
    values.put(
        Rows(
            keys=np.array([0, 1, 2, 3, 4, 5]),
            years=[2015, 2016, None, 2020, 2015, 2015],
            study_types=["randomized-controlled-trial", None, "cohort", "cohort", "meta-analysis", None],
            evidence_levels=[0.7, None, 0.4, 0.9, 1.0, 0.7],
            sources=["pubmed", "pmc", "pubmed", "bookshelf", "pubmed", "pubmed"],
            retracted=[False, False, False, False, True, False],
            priorities=[50, 50, 100, 10, 50, 0],
            mesh=[["Humans", "Stroke"], ["Humans", "Stroke"], [], ["Mice"], ["Humans"], ["Humans"]],
        )
    )
    return values


def _passing(values: DocValues, size: int = 6, **filters: object) -> list[int]:
    return np.flatnonzero(values.may_pass(size, SearchFilters.model_validate(filters))).tolist()


def test_the_defaults_drop_retracted_and_priority_zero() -> None:
    values = _values()
    assert _passing(values) == [0, 1, 2, 3]
    assert _passing(values, include_retracted=True) == [0, 1, 2, 3, 4]
    assert _passing(values, min_priority=50) == [0, 1, 2]


def test_a_null_fails_every_bound_as_in_sql() -> None:
    values = _values()
    assert _passing(values, year_to=2016) == [0, 1]  # the NULL year (key 2) fails an upper bound too
    assert _passing(values, year_from=2016) == [1, 3]
    assert _passing(values, min_evidence_level=0.0) == [0, 2, 3]  # the NULL level (key 1) fails
    assert _passing(values, study_types=["cohort", "case-report"]) == [2, 3]  # a type no chunk has: nothing


def test_evidence_is_compared_in_single_precision_as_postgresql_compares_real() -> None:
    values = _values()
    # 0.7 stored as real is 0.69999999; the bound 0.7 sent as real is the same number: it passes, as in SQL.
    assert _passing(values, min_evidence_level=0.7) == [0, 3]


def test_sources_and_combined_filters() -> None:
    values = _values()
    assert _passing(values, sources=["pmc", "bookshelf"]) == [1, 3]
    assert _passing(values, sources=["pubmed"], year_from=2015, year_to=2015, study_types=["cohort"]) == []


def test_keys_not_held_may_pass_and_the_arrays_grow() -> None:
    values = _values()
    # keys 6-9 were never read (written after the values were): they may pass, whatever the filter says
    assert _passing(values, size=10, year_from=2100) == [6, 7, 8, 9]
    values.put(Rows(np.array([40]), [2030], ["cohort"], [0.5], ["pmc"], [False], [50], [[]]))  # far past the arrays
    assert len(values) == 7 and len(values.known) >= 41
    assert _passing(values, size=45, year_from=2025) == [*range(6, 40), 40, 41, 42, 43, 44]
    assert _passing(values, size=41, sources=["pmc"])[-1] == 40
    # a changed document's chunk is replaced, not added to
    values.put(Rows(np.array([0]), [1999], [None], [None], ["pubmed"], [True], [50], [["Mice"]]))
    assert _passing(values, year_to=2000) == []
    assert _passing(values, year_to=2000, include_retracted=True) == [0]


def test_mesh_headings_are_held_as_sets_and_compared_exactly() -> None:
    values = _values()
    listed = {"mesh_descendants": False}
    assert _passing(values, mesh=["Humans"], **listed) == [0, 1]  # 4 and 5 fail the defaults
    assert _passing(values, mesh=["Mice", "Stroke"], **listed) == [0, 1, 3]
    assert _passing(values, mesh=["humans", "Rats"], **listed) == []  # exact text, as SQL's && compares
    assert _passing(values, mesh=["Humans"], include_retracted=True, **listed) == [0, 1, 4]
    # descendants not yet listed: not the values' to decide, every chunk may pass them
    assert _passing(values, mesh=["Rats"]) == [0, 1, 2, 3]
    # the two chunks of one document with the same headings share one set; none is the empty set
    assert values.mesh_set[0] == values.mesh_set[1] != values.mesh_set[4]
    assert values.mesh_set[2] == mesh.EMPTY_SET
    # a changed document's chunk gets its new headings
    values.put(Rows(np.array([3]), [2020], ["cohort"], [0.9], ["bookshelf"], [False], [10], [["Humans"]]))
    assert _passing(values, mesh=["Mice"], **listed) == []
    assert _passing(values, mesh=["Humans"], **listed) == [0, 1, 3]


def test_sets_listed_by_descriptor_and_sets_added_since_answer_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    names = [f"D{i}" for i in range(40)]
    headings = [sorted({names[j] for j in rng.integers(0, 40, rng.integers(0, 6))}) for _ in range(3_000)]
    sets = mesh.MeshSets()
    ids = np.concatenate([sets.add(headings[i : i + 700]) for i in range(0, 3_000, 700)])
    queries = [list(rng.choice(names, rng.integers(1, 4))) for _ in range(50)] + [["D3", "nowhere"], ["nowhere"]]

    def expected(query: list[str]) -> np.ndarray:
        return np.array([bool(set(query) & set(h)) for h in headings])

    scanned = [sets.matching(q)[ids] for q in queries]  # no lists built yet: every set scanned
    assert not sets.stale  # fewer new sets than RELIST_AFTER
    sets.relist()
    listed = [sets.matching(q)[ids] for q in queries]
    more = [sorted(set(h) | {"D0"}) for h in headings[:500]]  # sets added after the lists were built
    more_ids = sets.add(more)
    for query, a, b in zip(queries, scanned, listed, strict=True):
        assert np.array_equal(a, expected(query)) and np.array_equal(b, expected(query)), query
        assert np.array_equal(sets.matching(query)[more_ids], [bool(set(query) & set(h)) for h in more])
    assert sets.matching(["D0"])[more_ids].all() and more_ids.min() > ids.max()
    assert len(sets) == 1 + len(set(ids.tolist()) - {0}) + len(set(more_ids.tolist()))
    assert not sets.stale
    monkeypatch.setattr(mesh, "RELIST_AFTER", 100)
    assert sets.stale  # ~500 sets past the lists, more than 100 and an eighth of those listed
    sets.relist()
    assert not sets.stale
    for query in queries:
        assert np.array_equal(sets.matching(query)[more_ids], [bool(set(query) & set(h)) for h in more])
    # while everything is read, a list of headings seen in an earlier batch names the same set
    seen: mesh.SeenSets = {}
    first, again = sets.add([["D1", "D2"]], seen), sets.add([["D3"], ["D1", "D2"]], seen)
    assert again[1] == first[0] != again[0] and sets.matching(["D2"])[again].tolist() == [False, True]


def test_which_filters_the_values_hold_whole() -> None:
    assert holds_all(SearchFilters(year_from=2000, study_types=["cohort"], min_evidence_level=0.5, sources=["pmc"]))
    assert holds_all(SearchFilters(mesh=["Humans"], mesh_descendants=False, year_from=2000))
    for unheld in (
        {"mesh": ["Humans"]},  # its descendants are to be looked up in the tree first
        {"journals": ["Lancet"]},
        {"sections": ["Results"]},
        {"min_citation_count": 3},
        {"min_nih_percentile": 50},
    ):
        assert not holds_all(SearchFilters.model_validate(unheld))


def test_only_filters_that_narrow_a_held_column_use_the_values() -> None:
    assert not narrows(SearchFilters())  # the defaults: few chunks fail them, nothing worth a feed read
    assert not narrows(SearchFilters(mesh=["Humans"], include_retracted=True))
    for spec in (
        {"year_from": 2000},
        {"year_to": 2000},
        {"study_types": ["cohort"]},
        {"min_evidence_level": 0.5},
        {"sources": ["pmc"]},
        {"min_priority": 50},
    ):
        assert narrows(SearchFilters.model_validate(spec))


class _Unreachable:
    """A pool whose every connection attempt fails (the database down while the retriever starts)."""

    def __init__(self) -> None:
        self.attempts = 0

    def acquire(self) -> object:
        self.attempts += 1
        raise ConnectionRefusedError("database down")


async def test_a_failed_read_is_not_retried_by_every_search() -> None:
    pool = _Unreachable()
    follower = DocValuesFollower(pool)  # type: ignore[arg-type]
    assert await follower.current() is None  # starts the read
    await follower.start_loading()
    assert pool.attempts == 1 and not follower.loaded
    for _ in range(5):  # searches meanwhile check filters in SQL and start no read
        assert await follower.current() is None
    await follower.start_loading()
    assert pool.attempts == 1
    assert follower._failed_at is not None
    follower._failed_at -= RETRY_LOAD_AFTER_S + 1  # the wait has passed
    await follower.start_loading()
    assert pool.attempts == 2


class _FlakyPool:
    """A pool whose first statement fails (the primary restarting), then records what it is asked."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[object, ...]]] = []
        self.third = asyncio.Event()

    async def execute(self, sql: str, *args: object) -> str:
        self.statements.append((sql, args))
        if len(self.statements) == 3:
            self.third.set()
        if len(self.statements) == 1:
            raise ConnectionResetError("primary restarting")
        return "DELETE 0"


async def test_the_change_feed_is_pruned_on_and_on_through_a_failure() -> None:
    pool = _FlakyPool()
    task = asyncio.create_task(prune_forever(pool, every_s=0.01, kept_s=42.0))  # type: ignore[arg-type]
    await asyncio.wait_for(pool.third.wait(), timeout=5.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert all("DELETE FROM document_changes" in sql and args == (42.0,) for sql, args in pool.statements)


def test_verdicts_kept_between_searches_are_dropped_by_any_change(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.retriever.engine.doc_values import columns

    values = _values()
    computed: list[tuple[object, ...]] = []
    verdict = values.verdict

    def counting(condition: tuple[object, ...], compute: Callable[[], np.ndarray]) -> np.ndarray:
        def spy() -> np.ndarray:
            computed.append(condition)
            return compute()

        return verdict(condition, spy)

    monkeypatch.setattr(values, "verdict", counting)
    listed = {"mesh_descendants": False}
    assert _passing(values, year_from=2016) == [1, 3]
    first = len(computed)  # the defaults' two, the year bound, the keys not held
    assert first == 4
    assert _passing(values, year_from=2016) == [1, 3] and len(computed) == first  # all kept
    assert _passing(values, mesh=["Mice"], **listed) == [3] and len(computed) == first + 1
    # a change drops them: the new year and headings are seen
    values.put(Rows(np.array([3]), [2010], ["cohort"], [0.9], ["bookshelf"], [False], [10], [["Humans"]]))
    assert _passing(values, year_from=2016) == [1] and _passing(values, mesh=["Mice"], **listed) == []
    assert len(computed) == first + 1 + 5
    # a verdict of other keys than every held one from the first is never kept; the most recent ones are
    kept = len(computed)
    assert values.passing(np.array([1, 3]), SearchFilters(year_from=2010)).tolist() == [True, True]
    assert len(computed) == kept
    monkeypatch.setattr(columns, "VERDICTS_KEPT", 2)
    assert _passing(values, year_to=2016) == [0, 1, 3] and len(values._verdicts) == 2
