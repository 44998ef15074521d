"""Embedding throughput on real texts (issue 8).

(a) raw ``model.encode`` throughput (``SentenceTransformer.encode`` for the torch backend; the ONNX
    backend's own ``encode_passages``, which is its raw path), plus, with ``--paths``, the project's
    own batching path (``Embedder.encode_passages``) and the pre-tokenised fast path
    (``Embedder.encode_pretokenized`` on ids made beforehand, as the parser ships them).
(b) with ``--e2e``: end to end through real Kafka (``chunks.created`` -> ``chunks.embedded``): a
    Kafka broker (devstack, free ports, a temporary folder) and the embedder service as a
    subprocess (``python -m services.embedder``); N ``ChunkCreated`` events of the same texts (with
    the token ids the parser ships, unless ``--no-token-ids``) are published at once and the clock
    runs from the first publish to the last vector received. Raw (a) is measured just before and just
    after (b) in the same run, on the same texts and batch size; the ratio is (b) / mean(a).

Usage::

    .venv/bin/python bench/embed_throughput.py --model all-MiniLM-L6-v2 -n 512 --batch-size 64
    .venv/bin/python bench/embed_throughput.py --model bge-small-en-v1.5 --paths raw,pretok --json
    .venv/bin/python bench/embed_throughput.py --model all-MiniLM-L6-v2 -n 512 --batch-size 64 --e2e
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from devstack.common import free_port

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from shared.embedding import get_embedder  # noqa: E402
from shared.embedding.base import Embedder  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "beir_scifact" / "corpus.jsonl.gz"
PATHS = ("raw", "service", "pretok")


def load_texts(corpus: Path, n: int) -> list[str]:
    """The first ``n`` documents of a BEIR corpus (``title`` + ``text``), as the embedder sees chunks."""
    opener = gzip.open if corpus.suffix == ".gz" else open
    texts: list[str] = []
    with opener(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')}\n{doc.get('text', '')}".strip())
            if len(texts) >= n:
                break
    return texts


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], n: int, device: str, repeats: int = 1) -> float:
    """Best passages/s over ``repeats`` runs of ``fn``."""
    best = 0.0
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        best = max(best, n / (time.perf_counter() - start))
    return best


def raw_throughput(embedder: Embedder, texts: Sequence[str], batch_size: int, repeats: int = 1) -> float:
    """(a) Passages/s of the model's own ``encode`` on ``texts`` (warm-up run excluded)."""
    embedder.warm_up()
    model = getattr(embedder, "model", None)
    if model is not None:  # torch backend: plain SentenceTransformer.encode

        def run() -> Any:
            return model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    else:  # ONNX backend: its encode_passages is the raw path

        def run() -> Any:
            return embedder.encode_passages(texts, batch_size=batch_size)

    warm = list(texts[: min(len(texts), 2 * batch_size)])
    if model is not None:
        model.encode(warm, batch_size=batch_size, show_progress_bar=False)
    else:
        embedder.encode_passages(warm, batch_size=batch_size)
    return _timed(run, len(texts), embedder.device, repeats)


def service_throughput(embedder: Embedder, texts: Sequence[str], batch_size: int, repeats: int = 1) -> float:
    """Passages/s of the project's own batching path, ``Embedder.encode_passages`` (tokenisation included)."""
    embedder.encode_passages(list(texts[: 2 * batch_size]), batch_size=batch_size)
    return _timed(lambda: embedder.encode_passages(texts, batch_size=batch_size), len(texts), embedder.device, repeats)


def pretokenized_throughput(
    embedder: Embedder, texts: Sequence[str], batch_size: int, repeats: int = 1
) -> tuple[float, float]:
    """(tokenise passages/s, ``encode_pretokenized`` passages/s on those ids)."""
    start = time.perf_counter()
    ids = embedder.token_ids(texts)
    tok_rate = len(texts) / (time.perf_counter() - start)
    embedder.encode_pretokenized(ids[: 2 * batch_size], batch_size=batch_size)
    rate = _timed(lambda: embedder.encode_pretokenized(ids, batch_size=batch_size), len(ids), embedder.device, repeats)
    return tok_rate, rate


# ---------------------------------------------------------------------------------------------
# Part (b): end-to-end through real Kafka and the running embedder service.
# ---------------------------------------------------------------------------------------------


def chunk_events(
    texts: Sequence[str],
    run: str,
    token_ids: Sequence[Sequence[int]] | None = None,
    token_model: str | None = None,
    *,
    binary: bool = True,
) -> list[tuple[bytes, bytes]]:
    """``(key, ChunkCreated)`` for each text, as the parser publishes them (one document each): the binary
    version 2 (:mod:`shared.chunk_wire`), or with ``binary=False`` the JSON version 1 with packed ids."""
    from shared.chunk_wire import encode_chunk
    from shared.events import ChunkCreated

    out: list[tuple[bytes, bytes]] = []
    for i, text in enumerate(texts):
        ids = list(token_ids[i]) if token_ids is not None else None
        event = ChunkCreated(
            chunk_id=f"{run}-{i}",
            document_id=f"{run}-doc-{i}",
            ordinal=0,
            text=text,
            token_count=len(ids) if ids else len(text.split()),
            job_id=run,
            token_model=token_model if ids is not None else None,
        )
        if binary:
            body = encode_chunk(event, ids)
        else:
            packed = event.model_copy(update={"token_ids_u32": ChunkCreated.pack_ids(ids) if ids is not None else None})
            body = packed.model_dump_json(exclude_none=True).encode()
        out.append((event.document_id.encode(), body))
    return out


async def _publish_and_collect(
    bootstrap: str, events: Sequence[tuple[bytes, bytes]], run: str, wait_s: float, partitions: int
) -> tuple[float, int]:
    """Publish ``events`` to chunks.created; wait for their vectors on chunks.embedded.

    Returns (seconds from the first publish to the last vector, vectors received).
    """
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from shared.kafka.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_bytes=64 << 20,
        max_partition_fetch_bytes=16 << 20,
    )
    await consumer.start()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1 << 20, max_request_size=8 << 20
    )
    await producer.start()
    try:
        tps = [TopicPartition(CHUNKS_EMBEDDED, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end offsets now, not after the first vectors arrive
            await consumer.position(tp)
        wanted = {f"{run}-{i}" for i in range(len(events))}
        prefix = f'"chunk_id":"{run}-'.encode()
        seen: set[str] = set()
        start = time.perf_counter()
        futures = [await producer.send(CHUNKS_CREATED, value=v, key=k) for k, v in events]
        await asyncio.gather(*futures)
        last = start
        deadline = start + wait_s
        while len(seen) < len(wanted) and time.perf_counter() < deadline:
            batches = await consumer.getmany(timeout_ms=200, max_records=4096)
            for records in batches.values():
                for r in records:
                    if r.value and prefix in r.value:
                        cid = json.loads(r.value)["chunk_id"]
                        if cid in wanted:
                            seen.add(cid)
                            last = time.perf_counter()
        return last - start, len(seen)
    finally:
        await producer.stop()
        await consumer.stop()


class ServiceUnderTest:
    """Real Kafka (devstack, free ports, a temporary folder) + ``python -m services.embedder``."""

    def __init__(self, env: dict[str, str], partitions: int = 1) -> None:
        import os
        import tempfile

        from devstack.kafka import LocalKafka

        self.root = Path(tempfile.mkdtemp(prefix="evidentia-bench-"))
        os.chmod(self.root, 0o755)
        self.kafka = LocalKafka(self.root / "kafka", port=free_port(), controller_port=free_port())
        self.partitions = partitions
        self.extra_env = env
        self.proc: Any = None

    def __enter__(self) -> ServiceUnderTest:
        import os

        from devstack.processes import ServiceProcess
        from shared.kafka.topic_admin import ensure_topics
        from shared.kafka.topics import standard_topics

        self.kafka.ensure_libs()
        self.kafka.start(timeout=180)
        asyncio.run(ensure_topics(self.kafka.bootstrap, standard_topics(self.partitions)))
        env = dict(os.environ)
        env.update(
            {
                "EVIDENTIA_KAFKA_BOOTSTRAP": self.kafka.bootstrap,
                "EVIDENTIA_METRICS_PORT": str(free_port()),
                "HF_HUB_OFFLINE": "1",
                "PYTHONPATH": str(REPO),
                **self.extra_env,
            }
        )
        self.proc = ServiceProcess("embedder", int(env["EVIDENTIA_METRICS_PORT"]), self.root / "embedder.log", env)
        self.proc.start()
        deadline = time.monotonic() + 300
        while not self.proc.ready():
            if not self.proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the embedder did not become ready:\n{self.proc.tail(60)}")
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil

        if self.proc is not None:
            self.proc.stop()
        self.kafka.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.proc.port}/metrics"


def end_to_end_throughput(
    service: ServiceUnderTest, events: Sequence[tuple[bytes, bytes]], run: str, wait_s: float = 1800.0
) -> float:
    """(b) Passages/s from the first ``chunks.created`` publish to the last ``chunks.embedded`` vector."""
    seconds, got = asyncio.run(_publish_and_collect(service.kafka.bootstrap, events, run, wait_s, service.partitions))
    if got < len(events):
        raise RuntimeError(f"only {got} of {len(events)} vectors arrived within {wait_s:.0f}s")
    return len(events) / seconds


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="Model setting (name or folder).")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="BEIR corpus.jsonl[.gz].")
    p.add_argument("-n", type=int, default=1000, help="Texts to embed (from the start of the corpus).")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=None, help="Default: on CUDA only.")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=1, help="Timed runs per path; the best is reported.")
    p.add_argument(
        "--paths", default=None, help=f"Comma-separated, from {','.join(PATHS)} (default: raw; none with --e2e)."
    )
    p.add_argument("--json", action="store_true", help="Print one JSON object.")
    p.add_argument("--e2e", action="store_true", help="(b): also measure the embedder service through Kafka.")
    p.add_argument("--consume-batch", type=int, default=256, help="(b): EVIDENTIA_EMBEDDING_CONSUME_BATCH.")
    p.add_argument(
        "--token-ids",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="(b): ship token ids in chunks.created, as the parser does (default: yes).",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths_arg = args.paths if args.paths is not None else ("" if args.e2e else "raw")
    paths = [x.strip() for x in paths_arg.split(",") if x.strip()]
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown --paths {sorted(unknown)}; choose from {PATHS}")
    from shared.settings import EmbeddingSettings  # pydantic: not needed by the functions above (GPU check)

    settings = EmbeddingSettings(
        model=args.model, device=args.device, batch_size=args.batch_size, fp16=args.fp16, threads=args.threads
    )
    embedder = get_embedder(settings)
    texts = load_texts(args.corpus, args.n)
    load_start = time.perf_counter()
    embedder.warm_up()
    result: dict[str, Any] = {
        "model": embedder.name,
        "backend": type(embedder).__name__,
        "device": embedder.device,
        "fp16": bool(getattr(getattr(embedder, "config", None), "fp16", False)),
        "texts": len(texts),
        "batch_size": args.batch_size,
        "load_s": round(time.perf_counter() - load_start, 2),
    }
    if "raw" in paths:
        result["raw_passages_per_s"] = round(raw_throughput(embedder, texts, args.batch_size, args.repeats), 1)
    if "service" in paths:
        result["service_passages_per_s"] = round(service_throughput(embedder, texts, args.batch_size, args.repeats), 1)
    if "pretok" in paths:
        tok, pre = pretokenized_throughput(embedder, texts, args.batch_size, args.repeats)
        result["tokenise_passages_per_s"] = round(tok, 1)
        result["pretokenized_passages_per_s"] = round(pre, 1)
    if args.e2e:
        import os

        result["load_average_before"] = round(os.getloadavg()[0], 2)
        ids = embedder.passage_token_ids(texts) if args.token_ids else None
        env = {
            "EVIDENTIA_EMBEDDING_MODEL": args.model,
            "EVIDENTIA_EMBEDDING_BATCH_SIZE": str(args.batch_size),
            "EVIDENTIA_EMBEDDING_CONSUME_BATCH": str(args.consume_batch),
            "EVIDENTIA_EMBEDDING_DEVICE": args.device,
        }
        if args.threads:
            env["EVIDENTIA_EMBEDDING_THREADS"] = str(args.threads)
        if args.fp16 is not None:
            env["EVIDENTIA_EMBEDDING_FP16"] = str(args.fp16).lower()
        with ServiceUnderTest(env) as service:
            # One warm-up event: the consumer group is joined and the model is warm before the clock runs.
            end_to_end_throughput(
                service, chunk_events(texts[:1], "warmup", ids and ids[:1], embedder.name), "warmup", wait_s=300
            )
            events = chunk_events(texts, "run", ids, embedder.name)
            raw_before = raw_throughput(embedder, texts, args.batch_size, args.repeats)
            e2e = end_to_end_throughput(service, events, "run")
            raw_after = raw_throughput(embedder, texts, args.batch_size, args.repeats)
        raw_mean = (raw_before + raw_after) / 2
        result["raw_before_passages_per_s"] = round(raw_before, 1)
        result["end_to_end_passages_per_s"] = round(e2e, 1)
        result["raw_after_passages_per_s"] = round(raw_after, 1)
        result["token_ids_shipped"] = bool(args.token_ids)
        result["consume_batch"] = args.consume_batch
        result["ratio"] = round(e2e / raw_mean, 3)
        result["load_average_after"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
