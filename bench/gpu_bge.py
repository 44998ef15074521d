"""The default model (bge-small-en-v1.5) on a GPU through the torch backend: where it runs, how far its vectors
are from the CPU's, and the model stage's rate (bench/gpu_bge_check.sh).

The folder is the ONNX export's weights as :mod:`shared.embedding.onnx_to_torch` writes them (FP16 for the
trip); it is loaded by the embedder's own factory (``EVIDENTIA_EMBEDDING_BACKEND=torch``,
``EVIDENTIA_EMBEDDING_DEVICE=cuda``), so what runs is what the service runs. Prints JSON lines:

* ``runtime``: what ``/health`` says of the loaded embedder (device, provider, precision);
* ``vectors``: 1 - cosine between these vectors and the ONNX graph's on the CPU in FP32 (``REF``: the first
  passages of the corpus, embedded here beforehand by ``--prepare``), largest and mean;
* ``model_stage``: ``encode_pretokenized`` passages/s on the corpus's token ids, per batch size and token cap
  (uncapped: the abstracts as the chunker ships them, up to 512 tokens; 256: the issue's reference length).

    python bench/gpu_bge.py FOLDER CORPUS REF.npz
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from embed_throughput import load_texts  # noqa: E402

from shared.embedding import get_embedder  # noqa: E402
from shared.embedding.base import runtime_of, truncate_ids  # noqa: E402
from shared.settings import EmbeddingSettings  # noqa: E402


def main() -> None:
    folder, corpus, ref_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    device = os.environ.get("GPU_CHECK_DEVICE", "cuda")
    n = int(os.environ.get("GPU_CHECK_N", "100000"))
    repeats = int(os.environ.get("GPU_CHECK_REPEATS", "3"))
    batches = [int(b) for b in os.environ.get("GPU_CHECK_BATCHES", "256 512 1024").split()]
    caps = [int(c) for c in os.environ.get("GPU_CHECK_CAPS", "0 256").split()]
    t0 = time.perf_counter()
    emb = get_embedder(EmbeddingSettings(model=folder, device=device, backend="torch", batch_size=batches[0]))
    emb.warm_up()
    print(json.dumps({"runtime": runtime_of(emb), "load_s": round(time.perf_counter() - t0, 1)}), flush=True)

    ref = np.load(ref_path)
    texts = load_texts(corpus, n)
    sample = texts[: int(ref["n"])]
    want = ref["vectors"][: len(sample)]
    got = emb.encode_passages(sample)
    gap = 1.0 - (got * want).sum(axis=1)
    fast = emb.encode_pretokenized(emb.passage_token_ids(sample), batch_size=batches[0])
    fast_gap = 1.0 - (fast * want).sum(axis=1)
    print(
        json.dumps(
            {
                "vectors": "1 - cosine to the ONNX graph on the CPU (FP32)",
                "passages": len(sample),
                "encode_max": float(gap.max()),
                "encode_mean": float(gap.mean()),
                "pretokenized_max": float(fast_gap.max()),
                "within_1e-2": bool(max(gap.max(), fast_gap.max()) <= 1e-2),
            }
        ),
        flush=True,
    )

    t0 = time.perf_counter()
    ids_all = emb.passage_token_ids(texts)
    tok_rate = len(texts) / (time.perf_counter() - t0)
    for cap in caps:
        ids = ids_all if not cap else [truncate_ids(x, cap) for x in ids_all]
        mean_tokens = sum(map(len, ids)) / len(ids)
        for bs in batches:
            emb.encode_pretokenized(ids[: 2 * bs], batch_size=bs)
            best = 0.0
            for _ in range(repeats):
                start = time.perf_counter()
                emb.encode_pretokenized(ids, batch_size=bs)  # returns host arrays: the device has finished
                best = max(best, len(ids) / (time.perf_counter() - start))
            print(
                json.dumps(
                    {
                        "model_stage": "encode_pretokenized",
                        "cap_tokens": cap or None,
                        "mean_tokens": round(mean_tokens, 1),
                        "batch": bs,
                        "passages": len(ids),
                        "passages_per_s": round(best),
                        "tokenise_per_s_one_thread_call": round(tok_rate),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
