"""bench/store_cores.py: the reserve is handed out once, in order; parallel generation gives the serial rows."""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("store_cores_bench", ROOT / "bench" / "store_cores.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["store_cores_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_the_reserve_is_handed_out_in_batches_once_each_and_then_none() -> None:
    bench = _bench()
    sizes = [5, 3, 7]  # three bulk batches of uneven length
    rows = [
        ([f"c{b}-{i}" for i in range(n)], [f"d{b}-{i}" for i in range(n)], np.full((n, 2), b, dtype=np.float32))
        for b, n in enumerate(sizes)
    ]
    bench.RESERVE[:] = rows
    bench.BATCH = 4
    bench._TAKEN = mp.get_context("fork").Value("q", 0)
    taken = []
    while (part := bench._take_reserve()) is not None:
        ids, doc_ids, vectors = part
        assert 0 < len(ids) <= 4 and len(doc_ids) == len(ids) == len(vectors)
        assert len({i.split("-")[0] for i in ids}) == 1, "a part never spans two bulk batches"
        assert [d.replace("d", "c", 1) for d in doc_ids] == ids
        taken += ids
    assert taken == [c for ids, _, _ in rows for c in ids]
    assert bench._take_reserve() is None


def test_parallel_generation_gives_the_serial_rows_in_order() -> None:
    bench = _bench()
    source = bench.scale.load_source(None)
    basis = np.random.default_rng(0).normal(size=(30, 8)).astype(np.float32)
    gen = bench.scale.Generator(source, basis)
    batches = list(bench.generated(gen, 100, 7, 3, 2))
    assert [len(b[0]) for b in batches] == [3, 3, 1]
    serial = bench.rows([gen.doc(j) for j in range(100, 107)])
    assert [cid for b in batches for cid in b[2]] == serial[2]
    assert np.array_equal(np.concatenate([b[3] for b in batches]), serial[3])
    parsed = bench.scale.parsed_document(gen.doc(100))
    assert [c.text for c in parsed.chunks] == gen.doc(100).chunks and parsed.source_id == "scale100"


def test_split_spreads_writers_evenly() -> None:
    bench = _bench()
    assert bench._split(7, 3) == [3, 2, 2]
    assert sum(bench._split(32, 5)) == 32
