"""Vector precision (issue 14): the SQL types each precision maps to, and the setting that picks it."""

from __future__ import annotations

import numpy as np
import pytest
from pgvector import HalfVector
from pydantic import ValidationError

from services.retriever.engine.vector.search import _as_array
from services.retriever.engine.vector.tables import VectorIndex, cosine_opclass, hnsw_index_sql, vector_type
from shared.settings import DatabaseSettings


def test_new_indexes_are_half_precision_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVIDENTIA_DATABASE_VECTOR_PRECISION", raising=False)
    assert DatabaseSettings().vector_precision == "half"
    monkeypatch.setenv("EVIDENTIA_DATABASE_VECTOR_PRECISION", "single")
    assert DatabaseSettings().vector_precision == "single"
    monkeypatch.setenv("EVIDENTIA_DATABASE_VECTOR_PRECISION", "double")
    with pytest.raises(ValidationError):
        DatabaseSettings()


def test_each_precision_has_its_column_type_and_operator_class() -> None:
    assert vector_type("half", 384) == "halfvec(384)"
    assert vector_type("single", 384) == "vector(384)"
    assert cosine_opclass("half") == "halfvec_cosine_ops"
    assert cosine_opclass("single") == "vector_cosine_ops"
    half = VectorIndex("m", "model", 16, "chunk_vectors_m", "active", "half")
    assert half.column_type == "halfvec(16)"
    # An index recorded before the precision existed (and the migration's default) is single precision.
    assert VectorIndex("m", "model", 16, "chunk_vectors_m").column_type == "vector(16)"


def test_the_hnsw_index_uses_the_operator_class_of_its_vectors() -> None:
    db = DatabaseSettings(vector_precision="half", hnsw_m=12, hnsw_ef_construction=80)
    sql = hnsw_index_sql("chunk_vectors_x", db, "single")
    assert "USING hnsw (embedding vector_cosine_ops)" in sql
    assert "m = 12" in sql and "ef_construction = 80" in sql
    # Without a precision: that of new indexes (the setting).
    assert "(embedding halfvec_cosine_ops)" in hnsw_index_sql("chunk_vectors_x", db)
    assert "(embedding vector_cosine_ops)" in hnsw_index_sql(
        "chunk_vectors_x", db.model_copy(update={"vector_precision": "single"})
    )


def test_stored_half_vectors_come_back_as_float32() -> None:
    vec = np.array([0.1, -0.25, 1 / 3], dtype=np.float32)
    back = _as_array(HalfVector(vec))
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, vec, atol=1e-3)
    assert not np.array_equal(back, vec)  # 1/3 and 0.1 are not exact in 16 bits: it really went through half


def test_the_eval_report_shows_the_vector_index_it_searched() -> None:
    from evaluation.retrieval import EvalReport, ModeResult

    result = ModeResult("dense", {"nDCG@10": 0.68241}, 809, 4.8)
    plain = EvalReport("scifact", "m", 10, 20, "ir-measures", {}, [result])
    assert "vector_store" not in plain.as_dict()
    store = {"precision": "half", "bytes": 43_000, "total_bytes_per_chunk": 2150.0}
    sized = EvalReport("scifact", "m", 10, 20, "ir-measures", {}, [result], None, store)
    assert sized.as_dict()["vector_store"] == store
    assert sized.as_dict()["modes"]["dense"]["nDCG@10"] == 0.6824
