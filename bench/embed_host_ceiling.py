"""How fast the embedder service moves events through Kafka when the model costs (almost) nothing.

The GPU target (20,000 passages/s on one H200 with MiniLM) is reached by the model alone (the fast
path on token ids: ~35,000/s there), so what decides it is the service's own per-event host work:
Kafka fetch, ``ChunkCreated`` decoding, padding, ``ChunkEmbedded`` serialisation, the producer and the
commits, all in one Python process and under one GIL. This script measures that ceiling on any
machine, without a GPU: the running embedder service (``services.embedder.app``, its real handlers,
pipeline, producer and commits, through a real Kafka broker) with a stand-in model in place of the
neural network, which does the fast path's host work (truncate, length-sort, pad to int64 arrays) and then
sleeps ``n / rate`` seconds, releasing the GIL as a CUDA synchronisation does, and returns unit
vectors.

Method: a Kafka broker (devstack, free ports, a temporary folder); ``-n`` ``ChunkCreated``
events with the parser's token ids of SciFact abstracts published to ``chunks.created`` *before* the
service starts; then the service drains the backlog and the script polls the end offsets of
``chunks.embedded`` (no decoding on its side) and the service process's CPU time (``/proc``). The rate
and the service's CPU microseconds per passage (all its threads) are measured between 10% and 90% of
the vectors written (the steady state, without start-up and tail); with ``--replicas`` N > 1, from
the first moment the consumer group is stable with all N members (no rebalance inside the window).
Each ``--encoding`` gets a fresh broker. The CPU per passage is the figure that carries to another
machine: most of it holds the GIL, so ``1e6 / cpu_us`` is about what one process can move there,
whatever the GPU; replicas (one consumer group, one GPU shared) multiply it.

    .venv/bin/python bench/embed_host_ceiling.py -n 40000 --rate 35000 --encoding f32,list --partitions 4
    .venv/bin/python bench/embed_host_ceiling.py -n 80000 --encoding f32 --replicas 2 --partitions 4

Not a measurement of a GPU: a lower bound of what the host side allows, on the machine it runs on
(here the broker and the script share the cores with the service).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from embed_throughput import DEFAULT_CORPUS, chunk_events, load_texts  # noqa: E402

from devstack.common import free_port  # noqa: E402
from devstack.processes import ServiceProcess  # noqa: E402

STANDIN_RATE_ENV = "BENCH_STANDIN_RATE"
CPROFILE_ENV = "BENCH_CPROFILE"


# ------------------------------------------------------------------------------ the service side


def standin_main() -> None:
    """Run the embedder service with the stand-in model (the child process of this benchmark)."""
    import numpy as np

    import services.embedder.handlers as handlers
    from shared.embedding import get_embedder
    from shared.embedding.base import TokenIds, length_sorted_batches, pad_ids, truncate_ids
    from shared.settings import EmbeddingSettings

    rate = float(os.environ[STANDIN_RATE_ENV])

    class StandInEmbedder:
        """The configured model's name, dimension and tokenizer; a sleep in place of the forward pass."""

        def __init__(self, settings: EmbeddingSettings) -> None:
            real = get_embedder(settings)
            self._real = real
            self.name, self.device = real.name, "standin"
            self.query_prefix, self.passage_prefix = real.query_prefix, real.passage_prefix
            self.dim, self.max_seq_length = real.dim, real.max_seq_length
            unit = np.random.default_rng(0).standard_normal(self.dim).astype(np.float32)
            self._unit = unit / np.linalg.norm(unit)

        def warm_up(self) -> None:
            self._real.warm_up()

        def encode_pretokenized(self, ids: Sequence[TokenIds], batch_size: int | None = None) -> Any:
            limit, size = self.max_seq_length, batch_size or 64
            ids = [truncate_ids(seq, limit) for seq in ids]
            for batch in length_sorted_batches([len(s) for s in ids], size):
                pad_ids([ids[i] for i in batch], 0)  # the host tensors the GPU would be fed
            time.sleep(len(ids) / rate)  # the GPU's share; the GIL is free meanwhile
            return np.tile(self._unit, (len(ids), 1))

        def encode_passages(self, texts: Sequence[str], batch_size: int | None = None) -> Any:
            return self.encode_pretokenized(self._real.passage_token_ids(texts), batch_size)

    handlers.get_embedder = StandInEmbedder  # type: ignore[assignment,attr-defined]
    from services.embedder.app import app
    from shared.service import run_app

    profile_path = os.environ.get(CPROFILE_ENV)
    if not profile_path:
        run_app("embedder", app)
        return
    import cProfile

    profiler = cProfile.Profile()  # the event loop's thread only (Kafka client, decoding, publishing)
    profiler.enable()
    try:
        run_app("embedder", app)
    finally:
        profiler.disable()
        profiler.dump_stats(profile_path)


# ------------------------------------------------------------------------------ the measuring side


async def _publish(bootstrap: str, events: Sequence[tuple[bytes, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    from shared.kafka.topics import CHUNKS_CREATED

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20, max_request_size=8 << 20, acks="all"
    )
    await producer.start()
    try:
        futures = [await producer.send(CHUNKS_CREATED, value=v, key=k) for k, v in events]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of processes ``pids`` (all their threads) so far; NaN where /proc is missing."""
    total = float("nan") if not pids else 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")
    return total


async def _watch(
    bootstrap: str, partitions: int, n: int, timeout: float, pids: Sequence[int], members: int, base: int = 0
) -> list[tuple[float, int, float, bool]]:
    """(time, vectors on chunks.embedded beyond ``base``, service CPU seconds, group stable with ``members``)
    until ``n``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from shared.kafka.topics import CHUNKS_EMBEDDED

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        tps = [TopicPartition(CHUNKS_EMBEDDED, p) for p in range(partitions)]
        samples: list[tuple[float, int, float, bool]] = []
        deadline = time.perf_counter() + timeout
        stable = members <= 1
        while time.perf_counter() < deadline:
            count = int(sum((await consumer.end_offsets(tps)).values())) - base
            if not stable:
                stable = await _group_stable(admin, members)
            samples.append((time.perf_counter(), count, cpu_seconds(pids), stable))
            if count >= n:
                return samples
            await asyncio.sleep(0.05)
        raise RuntimeError(f"only {samples[-1][1] if samples else 0} of {n} vectors within {timeout:.0f}s")
    finally:
        await admin.close()
        await consumer.stop()


async def _group_stable(admin: Any, members: int) -> bool:
    """Whether the embedder group is stable with ``members`` members (raw DescribeGroups response)."""
    from aiokafka.errors import GroupCoordinatorNotAvailableError

    from services.embedder.handlers import GROUP_ID

    try:
        responses = await admin.describe_consumer_groups([GROUP_ID])
    except GroupCoordinatorNotAvailableError:  # no member has joined yet
        return False
    for response in responses:
        for group in response.groups:  # (error, id, state, protocol type, protocol, members, ...)
            if group[2] == "Stable" and len(group[5]) == members:
                return True
    return False


def steady_state(
    samples: list[tuple[float, int, float, bool]], n: int, low: float = 0.1, high: float = 0.9
) -> tuple[float, float]:
    """(vectors/s, service CPU microseconds per vector) from the sample at ``low * n`` (once the group is
    stable) to the one at ``high * n``; NaN when the group settled too late (use a larger ``-n``)."""
    start = next((s for s in samples if s[1] >= low * n and s[3]), None)
    t1, c1, cpu1, _ = next(s for s in samples if s[1] >= high * n)
    if start is None or t1 <= start[0] or c1 <= start[1]:
        return float("nan"), float("nan")
    t0, c0, cpu0, _ = start
    return (c1 - c0) / (t1 - t0), (cpu1 - cpu0) / (c1 - c0) * 1e6


def measure(encoding: str, events: list[tuple[bytes, bytes]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """``args.repeat`` rounds on one broker: each publishes the backlog, starts the service(s), measures the
    drain and stops them (the group's committed offsets carry the next round past the last backlog)."""
    import shutil
    import tempfile

    from devstack.kafka import LocalKafka
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    root = Path(tempfile.mkdtemp(prefix="evidentia-ceiling-"))
    os.chmod(root, 0o755)
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
    kafka.ensure_libs()
    kafka.start(timeout=180)
    results: list[dict[str, Any]] = []
    try:
        asyncio.run(ensure_topics(kafka.bootstrap, standard_topics(args.partitions)))
        env = {
            **os.environ,
            "EVIDENTIA_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "EVIDENTIA_EMBEDDING_MODEL": args.model,
            "EVIDENTIA_EMBEDDING_BATCH_SIZE": str(args.batch_size),
            "EVIDENTIA_EMBEDDING_CONSUME_BATCH": str(args.consume_batch),
            "EVIDENTIA_EMBEDDING_VECTOR_ENCODING": encoding,
            "EVIDENTIA_LOG_LEVEL": "WARNING",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO),
            STANDIN_RATE_ENV: str(args.rate / args.replicas),  # the replicas share one (stand-in) GPU
        }
        if args.profile:
            env["BENCH_PROFILE"] = str(args.profile.with_suffix(f".{encoding}.txt"))
        for round_ in range(args.repeat):
            round_env = dict(env)
            if args.cprofile:
                round_env[CPROFILE_ENV] = str(args.cprofile.with_suffix(f".{encoding}.{round_}.prof"))
            results.append(_round(kafka.bootstrap, encoding, events, args, root, round_env, round_ * len(events)))
        return results
    finally:
        kafka.stop()
        shutil.rmtree(root, ignore_errors=True)


def _round(
    bootstrap: str,
    encoding: str,
    events: list[tuple[bytes, bytes]],
    args: argparse.Namespace,
    root: Path,
    env: dict[str, str],
    base: int,
) -> dict[str, Any]:
    """One round: publish the backlog, start the replicas, measure the drain of ``len(events)`` vectors."""
    procs: list[ServiceProcess] = []
    try:
        for i in range(args.replicas):  # one consumer group: the partitions are shared out among them
            port = free_port()
            procs.append(
                StandInProcess(
                    "embedder", port, root / f"embedder-{i}.log", {**env, "EVIDENTIA_METRICS_PORT": str(port)}
                )
            )
        asyncio.run(_publish(bootstrap, events))  # the backlog first: the services only drain it
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        for proc in procs:
            proc.start()
        # Under py-spy the children are py-spy: no CPU figure then.
        pids = [] if args.profile else [p.proc.pid for p in procs if p.proc is not None]
        samples = asyncio.run(_watch(bootstrap, args.partitions, len(events), args.timeout, pids, args.replicas, base))
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"a service died:\n{proc.tail(40)}")
        first = next(t for t, c, *_ in samples if c > 0)
        rate, cpu_us = steady_state(samples, len(events))
        return {
            "encoding": encoding,
            "replicas": args.replicas,
            "events": len(events),
            "steady_passages_per_s": round(rate),
            "service_cpu_us_per_passage": round(cpu_us, 1),
            "first_vector_s": round(first - started, 1),
            "drain_s": round(samples[-1][0] - first, 2),
            "load_average_before": round(load_before, 2),
            "load_average_after": round(os.getloadavg()[0], 2),
        }
    finally:
        for proc in procs:
            proc.stop()


class StandInProcess(ServiceProcess):
    """A ``ServiceProcess`` running this file's :func:`standin_main` instead of ``python -m services.embedder``."""

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            argv = [sys.executable, __file__, "--serve-standin"]
            profile = self.env.get("BENCH_PROFILE")
            if profile:  # py-spy: the service's threads while on a CPU
                argv = ["py-spy", "record", "--threads", "--rate", "250", "--format", "raw", "-o", profile, "--", *argv]
            self.proc = subprocess.Popen(
                argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.env.get("BENCH_PROFILE") and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(60)
        super().stop(timeout)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="Its tokenizer, name and dimension are used.")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("-n", type=int, default=20_000, help="Events (the corpus is cycled with new chunk ids).")
    p.add_argument("--rate", type=float, default=35_000.0, help="The stand-in model's passages/s.")
    p.add_argument("--batch-size", type=int, default=512, help="EVIDENTIA_EMBEDDING_BATCH_SIZE.")
    p.add_argument("--consume-batch", type=int, default=1024, help="EVIDENTIA_EMBEDDING_CONSUME_BATCH.")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="Service processes in the group, sharing the stand-in model's --rate (one GPU).",
    )
    p.add_argument("--encoding", default="f32,list", help="EVIDENTIA_EMBEDDING_VECTOR_ENCODING values to compare.")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--profile", type=Path, help="Record the service with py-spy (GIL holders) into this file.")
    p.add_argument(
        "--cprofile", type=Path, help="cProfile the service's event-loop thread into this file (one per round)."
    )
    p.add_argument(
        "--chunk-format",
        choices=("binary", "json"),
        default="binary",
        help="ChunkCreated on the wire: the parser's binary version 2, or JSON version 1 (packed ids).",
    )
    p.add_argument("--repeat", type=int, default=1, help="Rounds on one broker (a backlog each); one line per round.")
    p.add_argument("--serve-standin", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve_standin:
        standin_main()
        return 0
    from shared.embedding import get_embedder
    from shared.settings import EmbeddingSettings

    embedder = get_embedder(EmbeddingSettings(model=args.model))
    texts = load_texts(args.corpus, min(args.n, 6000))
    ids = embedder.passage_token_ids(texts)
    cycled = [texts[i % len(texts)] for i in range(args.n)]
    cycled_ids = [ids[i % len(ids)] for i in range(args.n)]
    events = chunk_events(cycled, "ceiling", cycled_ids, embedder.name, binary=args.chunk_format == "binary")
    results = []
    for encoding in [e.strip() for e in args.encoding.split(",") if e.strip()]:
        for result in measure(encoding, events, args):
            result.update(
                model_rate=args.rate,
                batch_size=args.batch_size,
                consume_batch=args.consume_batch,
                partitions=args.partitions,
                cpus=os.cpu_count(),
            )
            results.append(result)
            print(json.dumps(result) if args.json else "  ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
