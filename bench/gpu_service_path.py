"""The embedder service's own batching path on a GPU, without Kafka (bench/gpu_check.sh, issue 8).

What the service does per consumed batch, minus the broker: ``ChunkCreated`` JSON (with the token ids
the parser ships) decoded on the event loop, submitted to the service's :class:`EmbedPipeline`
(model thread: ``encode_vectors`` -> fast path; serialiser thread: ``ChunkEmbedded`` JSON), and
"published" to an in-memory sink that only counts. Prints passages/s per consume batch size, with
the model's busy share (encode seconds / wall seconds) and the share of the wall spent decoding
events on the event loop, then with ``GPU_CHECK_PROCS`` (default "1 2 3")
2 and 3 such processes sharing the device, each with its share of the texts, started together (total
passages/s: one process's host work is the limit on a GPU). ``GPU_CHECK_COPIES`` (default 8) repeats
the texts so each rate is taken over seconds. ``GPU_CHECK_SWITCH_MS`` (default "5") and
``GPU_CHECK_MODEL_BATCHES`` (default ``GPU_CHECK_MODEL_BATCH``, 512) vary the single-process runs: the
interpreter's GIL switch interval and the model batch; ``GPU_CHECK_DECODE`` ("loop", "model-thread", "single")
where the events are decoded. Needs numpy, torch, sentence-transformers and
pydantic (carried as wheels in models/gpu/pylib when the machine lacks it).

    python bench/gpu_service_path.py models/gpu/all-MiniLM-L6-v2 models/gpu/corpus.jsonl.gz
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from embed_throughput import load_texts  # noqa: E402

from services.embedder.encode import encode_vectors, serialize_vectors  # noqa: E402
from services.embedder.pipeline import Batch, EmbedPipeline, Payload  # noqa: E402
from shared.chunk_wire import encode_chunk, read_chunk  # noqa: E402
from shared.embedding.base import Embedder, EmbedderConfig, truncate_ids  # noqa: E402
from shared.embedding.sentence_transformers import SentenceTransformerEmbedder  # noqa: E402
from shared.events import ChunkCreated  # noqa: E402

WIRE = os.environ.get("GPU_CHECK_WIRE", "binary")
"""How the records are framed: ``binary`` (version 2, what the parser publishes; read as the embedder's decode
thread reads it, :func:`shared.chunk_wire.read_chunk`) or ``json`` (version 1 with packed ids, through pydantic)."""


def read_record(body: bytes) -> Any:
    """One record's chunk, as the embedder decodes it."""
    return read_chunk(body) if WIRE == "binary" else ChunkCreated.model_validate_json(body)


async def service_path(
    emb: Embedder, records: list[bytes], consume: int, batch: int, decode_in: str = "loop"
) -> dict[str, float]:
    """One run; ``decode_in`` "loop" decodes each batch's events on the event loop (as the service does),
    "model-thread" hands the raw records to the model's thread, which decodes them before encoding, "single"
    also serialises there (one thread does the whole batch)."""
    sent = 0

    async def publish(payloads: list[Payload]) -> None:
        nonlocal sent
        sent += len(payloads)

    decoded: dict[int, list[ChunkCreated]] = {}

    def encode(items: list[Any]) -> Any:
        if decode_in == "loop":
            return encode_vectors(emb, items, batch)
        events = [read_record(r) for r in items]
        if decode_in == "single":  # the model's thread does all of it: no other thread wants the GIL
            return serialize_vectors(emb.name, emb.dim, events, encode_vectors(emb, events, batch))
        decoded[id(items)] = events
        return encode_vectors(emb, events, batch)

    def serialize(items: list[Any], vectors: Any) -> list[Payload]:
        if decode_in == "single":
            return list(vectors)
        events = items if decode_in == "loop" else decoded.pop(id(items))
        return serialize_vectors(emb.name, emb.dim, events, vectors)

    pipe: EmbedPipeline[Any] = EmbedPipeline(encode, publish, serialize=serialize, depth=2)
    await pipe.start()
    decode_s = 0.0
    start = time.perf_counter()
    for i in range(0, len(records), consume):
        t0 = time.perf_counter()
        if decode_in == "loop":
            items: list[Any] = [read_record(r) for r in records[i : i + consume]]
        else:
            items = records[i : i + consume]
        decode_s += time.perf_counter() - t0
        await pipe.submit(Batch(events=items, offsets={}))
    await pipe.drain()
    wall = time.perf_counter() - start
    await pipe.stop()
    assert sent == len(records), (sent, len(records))
    return {
        "passages_per_s": round(len(records) / wall),
        "model_busy": round(pipe.stats.encode_s / wall, 3),
        "decode_share": round(decode_s / wall, 3),
        "encoder_idle_share": round(pipe.stats.encoder_idle_s / wall, 3),
    }


def gpu_check_embedder(folder: str, device: str, batch: int) -> Embedder:
    """The GPU check's model from ``folder`` on ``device`` (fp16 on CUDA), loaded: MiniLM on torch, or, for a
    folder holding ``onnx/model.onnx`` (bge-small-en-v1.5 as ``evidentia models fetch`` writes it), the
    service's own factory (:func:`shared.embedding.get_embedder`), i.e. the runtime and provider the
    embedder itself would pick for ``EVIDENTIA_EMBEDDING_DEVICE=device``."""
    backend = "onnx" if (Path(folder) / "onnx" / "model.onnx").is_file() else None
    if backend is None and (Path(folder) / "evidentia.json").is_file():
        backend = "torch"  # a catalogue model's weights exported for torch (shared.embedding.onnx_to_torch)
    if backend is not None:
        from shared.embedding import get_embedder
        from shared.settings import EmbeddingSettings

        model = get_embedder(EmbeddingSettings(model=folder, device=device, batch_size=batch, backend=backend))
        model.warm_up()
        return model
    emb = SentenceTransformerEmbedder(
        EmbedderConfig(
            name="sentence-transformers/all-MiniLM-L6-v2",
            source=folder,
            device=device,
            fp16=device.startswith("cuda"),
            batch_size=batch,
        )
    )
    emb.warm_up()
    return emb


def _replica(
    folder: str, device: str, batch: int, consume: int, records: list[bytes], ready: Any, go: Any, out: Any
) -> None:
    """One service process of several sharing the device: warm up, wait for the others, run, report."""
    emb = gpu_check_embedder(folder, device, batch)
    asyncio.run(service_path(emb, records[: 4 * batch], consume, batch))  # warm-up
    ready.put(os.getpid())
    go.wait()
    start = time.perf_counter()
    row = asyncio.run(service_path(emb, records, consume, batch))
    out.put((start, time.perf_counter(), len(records), row["model_busy"]))


def replicas_rate(
    folder: str, device: str, batch: int, consume: int, records: list[bytes], procs: int
) -> dict[str, Any]:
    """``procs`` service processes on one device, each with its share of the records, started together."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [records[i::procs] for i in range(procs)]
    workers = [
        ctx.Process(target=_replica, args=(folder, device, batch, consume, share, ready, go, out)) for share in shares
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=600)
    go.set()
    results = [out.get(timeout=1800) for _ in workers]
    for w in workers:
        w.join(60)
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    return {
        "passages_per_s": round(sum(r[2] for r in results) / wall),
        "model_busy_per_process": [r[3] for r in results],
    }


def main() -> None:
    folder, corpus = sys.argv[1], sys.argv[2]
    n = int(os.environ.get("GPU_CHECK_N", "100000"))
    batch = int(os.environ.get("GPU_CHECK_MODEL_BATCH", "512"))
    consumes = [int(c) for c in os.environ.get("GPU_CHECK_CONSUME", "256 1024 4096").split()]
    procs_list = [int(c) for c in os.environ.get("GPU_CHECK_PROCS", "1 2 3").split()]
    device = os.environ.get("GPU_CHECK_DEVICE", "cuda")
    emb = gpu_check_embedder(folder, device, batch)
    copies = int(os.environ.get("GPU_CHECK_COPIES", "8"))
    texts = load_texts(Path(corpus), n)
    ids = emb.passage_token_ids(texts)
    cap = int(os.environ.get("GPU_CHECK_MAX_TOKENS", "0"))
    if cap:  # chunks of at most ``cap`` tokens (the [SEP] kept), as a smaller chunk setting would ship them
        ids = [truncate_ids(x, cap) for x in ids]
    texts, ids = texts * copies, ids * copies  # each rate over seconds of work, not a fraction of one
    model_name = emb.name

    def record(i: int, text: str, x: list[int]) -> bytes:
        event = ChunkCreated(
            chunk_id=f"c{i}", document_id=f"d{i}", ordinal=0, text=text, token_count=len(x), token_model=model_name
        )
        if WIRE == "binary":
            return encode_chunk(event, x)
        packed = event.model_copy(update={"token_ids_u32": ChunkCreated.pack_ids(x)})
        return packed.model_dump_json(exclude_none=True).encode()

    records = [record(i, t, x) for i, (t, x) in enumerate(zip(texts, ids, strict=True))]
    print(json.dumps({"records": len(records), "wire": WIRE, "mean_tokens": round(sum(map(len, ids)) / len(ids), 1)}))
    # The interpreter's GIL switch interval (default 5 ms): how long the thread driving the GPU may wait for
    # the GIL each time a torch call hands it back, while the event loop decodes events.
    switches = [float(x) for x in os.environ.get("GPU_CHECK_SWITCH_MS", "5").split()]
    model_batches = [int(b) for b in os.environ.get("GPU_CHECK_MODEL_BATCHES", str(batch)).split()]
    decodes = os.environ.get("GPU_CHECK_DECODE", "loop").split()
    if 1 in procs_list:
        asyncio.run(service_path(emb, records[: 4 * batch], consumes[0], batch))  # warm-up
        for switch_ms, decode_in, model_batch, consume in itertools.product(switches, decodes, model_batches, consumes):
            sys.setswitchinterval(switch_ms / 1000)
            row = asyncio.run(service_path(emb, records, consume, model_batch, decode_in))
            print(
                json.dumps(
                    {
                        "path": f"service pipeline (no Kafka), {device}, token ids, {WIRE}",
                        "model": emb.name,
                        "processes": 1,
                        "texts": len(records),
                        "consume_batch": consume,
                        "model_batch": model_batch,
                        "switch_ms": switch_ms,
                        "decode_in": decode_in,
                        **row,
                    }
                ),
                flush=True,
            )
        sys.setswitchinterval(0.005)
    del emb
    consume = 1024 if 1024 in consumes else consumes[0]
    for procs in [p for p in procs_list if p > 1]:  # replicas sharing the device, as pods sharing a GPU would
        row = replicas_rate(folder, device, batch, consume, records, procs)
        print(
            json.dumps(
                {
                    "path": f"service pipeline (no Kafka), {device}, token ids",
                    "processes": procs,
                    "texts": len(records),
                    "consume_batch": consume,
                    "model_batch": batch,
                    **row,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
