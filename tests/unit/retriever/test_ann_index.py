"""Which HNSW or IVFFlat index a vector table should have, decided from the settings, its rows and its indexes."""

from __future__ import annotations

from typing import Any

import pytest

from services.retriever.engine.vector.ann_index import AnnIndex, auto_lists, plan, probes_for
from services.retriever.engine.vector.search import nearest_chunks_settings
from services.retriever.engine.vector.tables import VectorIndex, ivfflat_index_name
from shared.settings import DEFAULT_IVFFLAT_PROBES, DatabaseSettings

INDEX = VectorIndex("m", "model", 384, "chunk_vectors_m", "active", "half")
T = INDEX.table_name
HNSW = AnnIndex(f"{T}_hnsw", "hnsw", True)


def _db(**values: Any) -> DatabaseSettings:
    return DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": "postgresql://x", **values})


def _ivf(lists: int, valid: bool = True) -> AnnIndex:
    return AnnIndex(ivfflat_index_name(T, lists), "ivfflat", valid, lists)


def test_auto_lists_follow_pgvector_advice() -> None:
    assert [auto_lists(n) for n in (0, 999, 20_000, 1_000_000, 4_000_000, 10_000_000)] == [1, 1, 20, 1000, 2000, 3162]


def test_hnsw_is_built_where_missing_and_replaces_an_ivfflat_index_only_once_built() -> None:
    todo = plan(INDEX, _db(), 50_000, [_ivf(50)])
    assert (
        todo.build is not None
        and "CONCURRENTLY" in todo.build
        and "USING hnsw (embedding halfvec_cosine_ops)" in todo.build
    )
    assert todo.drop_first == [] and todo.drop_after == [_ivf(50).name]
    assert plan(INDEX, _db(), 50_000, [HNSW]).empty


def test_a_build_left_invalid_is_dropped_before_it_is_built_again() -> None:
    todo = plan(INDEX, _db(vector_index="ivfflat"), 50_000, [HNSW, _ivf(50, valid=False)])
    assert todo.drop_first == [_ivf(50).name]
    assert (
        todo.build is not None and f"{_ivf(50).name} ON {T} USING ivfflat" in todo.build and "lists = 50" in todo.build
    )
    assert todo.drop_after == [HNSW.name]


def test_ivfflat_waits_for_enough_rows_to_train_on() -> None:
    db = _db(vector_index="ivfflat", ivfflat_min_rows=20_000)
    assert plan(INDEX, db, 19_999, []).empty  # searched exactly meanwhile
    assert plan(INDEX, db, 19_999, [HNSW]).empty  # the HNSW index of a store switching method keeps serving
    todo = plan(INDEX, db, 20_000, [HNSW])
    assert todo.build is not None and "lists = 20)" in todo.build and todo.drop_after == [HNSW.name]


@pytest.mark.parametrize(("rows", "rebuilt_with"), [(199_999, None), (200_000, 200), (1_000_000, 1000)])
def test_ivfflat_is_trained_again_as_the_rows_grow(rows: int, rebuilt_with: int | None) -> None:
    todo = plan(INDEX, _db(vector_index="ivfflat"), rows, [_ivf(100)])  # trained on 100k rows
    if rebuilt_with is None:
        assert todo.empty
    else:
        assert todo.build is not None and f"lists = {rebuilt_with})" in todo.build
        assert todo.drop_after == [_ivf(100).name]


def test_fixed_lists_are_kept_exactly() -> None:
    db = _db(vector_index="ivfflat", ivfflat_lists=64)
    assert plan(INDEX, db, 10_000_000, [_ivf(64)]).empty
    todo = plan(INDEX, db, 50_000, [_ivf(50)])
    assert todo.build is not None and "lists = 64)" in todo.build and todo.drop_after == [_ivf(50).name]
    # an older index beside the current one goes, the current one stays
    assert plan(INDEX, db, 50_000, [_ivf(64), _ivf(32), HNSW]).drop_after == [_ivf(32).name, HNSW.name]


def test_a_search_sets_both_methods_parameters() -> None:
    sql = nearest_chunks_settings(40, 100, filtered=False, probes=12)
    assert "hnsw.ef_search = 100" in sql and "ivfflat.probes = 12" in sql
    assert "ivfflat.iterative_scan = relaxed_order" in sql and "enable_sort" not in sql


def test_probes_are_a_share_of_the_index_lists_unless_a_count_is_set() -> None:
    share = _db(ivfflat_probe_share=0.3)
    assert [probes_for(lists, share) for lists in (1, 8, 107, 999, 3162)] == [1, 3, 33, 300, 949]
    assert probes_for(10, _db(ivfflat_probe_share=0.1)) == 1  # 0.1 x 10 is one list, not two (float error)
    assert probes_for(None, share) == DEFAULT_IVFFLAT_PROBES  # no IVFFlat index: nothing reads it
    assert probes_for(999, _db(ivfflat_probes=16, ivfflat_probe_share=0.3)) == 16  # a fixed count wins
    assert probes_for(107, _db()) >= 0.3 * 107  # the default keeps a sizeable share (chosen on folds)


def test_the_build_memory_is_a_postgresql_size_or_refused() -> None:
    assert _db().ann_build_memory is None  # the server's maintenance_work_mem
    assert _db(ann_build_memory="6GB").ann_build_memory == "6GB"
    for bad in ("6 GB", "6gb", "0MB", "6GB'; DROP TABLE documents; --", "-1GB"):
        with pytest.raises(ValueError):
            _db(ann_build_memory=bad)
