"""What the embedder's model stage costs on a GPU, factor by factor (bench/gpu_check.sh, issue 20).

The service path (bench/gpu_service_path.py) reaches about 10,000 passages/s on an H100 while
``encode_pretokenized`` on the whole corpus in one call reaches 24,000-28,000/s. This times the same
passages (the SciFact abstracts, repeated ``GPU_CHECK_COPIES`` times) through ``encode_pretokenized`` and
``encode_vectors`` with one factor changed at a time: call size (the service calls once per consumed
batch), token ids as lists or as the uint32 arrays the events carry, the calling thread (main or the
pipeline's worker thread), torch's CPU threads, and the events' own path (``encode_vectors``). One line
of JSON per configuration, passages/s over all the passages, after one warm-up call.

    python bench/gpu_encode_breakdown.py models/gpu/all-MiniLM-L6-v2 models/gpu/corpus.jsonl.gz
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from embed_throughput import load_texts  # noqa: E402
from gpu_service_path import gpu_check_embedder  # noqa: E402

from services.embedder.encode import encode_vectors  # noqa: E402
from shared.events import ChunkCreated  # noqa: E402


def _rate(run: Callable[[Sequence[Any]], Any], items: Sequence[Any], call: int, sync: Callable[[], None]) -> int:
    run(items[:call])
    sync()
    start = time.perf_counter()
    for i in range(0, len(items), call):
        run(items[i : i + call])
    sync()
    return round(len(items) / (time.perf_counter() - start))


def main() -> None:
    import torch

    folder, corpus = sys.argv[1], sys.argv[2]
    device = os.environ.get("GPU_CHECK_DEVICE", "cuda")
    batch = int(os.environ.get("GPU_CHECK_MODEL_BATCH", "512"))
    copies = int(os.environ.get("GPU_CHECK_COPIES", "8"))
    emb = gpu_check_embedder(folder, device, batch)
    texts = load_texts(Path(corpus), 100_000)
    lists = emb.passage_token_ids(texts) * copies
    arrays = [np.asarray(x, dtype=np.uint32) for x in lists]
    events = [
        ChunkCreated.model_validate_json(
            ChunkCreated(
                chunk_id=f"c{i}",
                document_id=f"d{i}",
                ordinal=0,
                text="t",
                token_count=len(x),
                token_ids_u32=ChunkCreated.pack_ids(x),
                token_model=emb.name,
            ).model_dump_json(exclude_none=True)
        )
        for i, x in enumerate(lists)
    ]

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    pool = ThreadPoolExecutor(max_workers=1)

    def in_worker(fn: Callable[[Sequence[Any]], Any]) -> Callable[[Sequence[Any]], Any]:
        return lambda xs: pool.submit(fn, xs).result()

    def pre(xs: Sequence[Any]) -> Any:
        return emb.encode_pretokenized(xs, batch)

    def vec(xs: Sequence[Any]) -> Any:
        return encode_vectors(emb, xs, batch)

    print(json.dumps({"torch_threads": torch.get_num_threads(), "passages": len(lists), "model_batch": batch}))
    configs: list[tuple[str, Callable[[Sequence[Any]], Any], Sequence[Any], int]] = [
        ("pretokenized, lists, main thread", pre, lists, len(lists)),
        ("pretokenized, lists, main thread", pre, lists, 4096),
        ("pretokenized, lists, main thread", pre, lists, 1024),
        ("pretokenized, uint32 arrays, main thread", pre, arrays, 1024),
        ("pretokenized, uint32 arrays, worker thread", in_worker(pre), arrays, 1024),
        ("pretokenized, uint32 arrays, worker thread", in_worker(pre), arrays, 4096),
        ("encode_vectors(events), main thread", vec, events, 1024),
        ("encode_vectors(events), worker thread", in_worker(vec), events, 1024),
    ]
    for name, fn, items, call in configs:
        print(json.dumps({"path": name, "call": call, "passages_per_s": _rate(fn, items, call, sync)}), flush=True)
    torch.set_num_threads(1)
    pool.submit(torch.set_num_threads, 1).result()
    for name, fn, items, call in configs[3:5]:
        row = {"path": name + ", torch threads 1", "call": call, "passages_per_s": _rate(fn, items, call, sync)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
