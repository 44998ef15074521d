"""``evidentia reindex --model X``: re-embed every chunk with model X through the running pipeline, then switch.

How it goes through Kafka:

1. A *building* vector index is created for X (``vector_indexes``; the active one keeps serving).
2. Every chunk without a vector in X's index is published to ``chunks.reindex`` as a ``ChunkCreated``
   with ``target_model`` X (and X's token ids, so the embedder skips tokenisation).
3. A reindex embedder of X (``EVIDENTIA_EMBEDDING_MODEL=X python -m services.embedder.reindex``, or
   ``--spawn-embedder`` to have this command start and stop one) consumes them in X's own consumer
   group and publishes the vectors to ``chunks.embedded``; the running retriever stores vectors of X in
   X's building index (``index_for``). Meanwhile the regular embedder keeps embedding new chunks with
   the current model; chunks created during the reindex are picked up on the next poll.
4. When every chunk has a vector in X's index, X is activated and the old index retired (one
   transaction). Restart the services with ``EVIDENTIA_EMBEDDING_MODEL=X``: the retriever refuses any
   other model than the active index's. Chunks created between the switch and the restart got only
   an old-model vector; running ``evidentia reindex --model X`` again (X active: fill mode) embeds them.

Precision (``EVIDENTIA_DATABASE_VECTOR_PRECISION``): the new index stores its vectors in the configured
precision. With X the active model but the active index in another precision, nothing is re-embedded: the
stored vectors are copied into a new index of the configured precision (converted by PostgreSQL), which is
activated in the transaction that copies the last of them (writes to the old index wait meanwhile). Restart
the retriever after the switch (it writes to the index it started with), then run the command again to
embed the chunks stored in between.

Without progress for ``--stall-s`` (no embedder of X running, events dead-lettered) the missing chunks
are published again; nothing is switched before the index is complete or when ``--timeout`` passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devstack.common import free_port

REPO = Path(__file__).resolve().parents[1]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "reindex",
        help="Re-embed every chunk with another model through the pipeline; switch when complete. With the "
        "active model: move the store to EVIDENTIA_DATABASE_VECTOR_PRECISION (vectors copied, not re-embedded).",
    )
    p.add_argument(
        "--model",
        required=True,
        help="The new embedding model (a name `evidentia models list` shows, a folder or a hub name).",
    )
    p.add_argument(
        "--spawn-embedder",
        action="store_true",
        help="Start a reindex embedder of the model (python -m services.embedder.reindex) here and "
        "stop it at the end; otherwise one must be running.",
    )
    p.add_argument("--no-switch", action="store_true", help="Fill the new index but do not activate it.")
    p.add_argument("--timeout", type=float, default=24 * 3600.0, help="Give up (no switch) after this many seconds.")
    p.add_argument(
        "--stall-s",
        type=float,
        default=300.0,
        help="Publish the missing chunks again after this long without progress.",
    )
    p.add_argument("--poll-s", type=float, default=2.0, help="Seconds between progress checks.")
    p.add_argument("--batch", type=int, default=2000, help="Chunks read from the database and published at once.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(reindex(args))


def spawn_reindex_embedder(model: str, log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m services.embedder.reindex`` for ``model`` (same environment otherwise)."""
    env = dict(os.environ)
    env.update({"EVIDENTIA_EMBEDDING_MODEL": model, "EVIDENTIA_METRICS_PORT": str(free_port())})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "services.embedder.reindex"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _print_summary(
    index: str, model: str, dim: int, vectors: int, took: float, switched_to: str | None, retired: str | None
) -> None:
    """The ``--json`` result: one object on stdout."""
    summary = {"index": index, "model": model, "dim": dim, "vectors": vectors, "seconds": round(took, 1)}
    print(json.dumps({**summary, "switched_to": switched_to, "retired": retired}))


def reindex_frames(
    rows: Sequence[Mapping[str, Any]], ids: Sequence[Sequence[int]] | None, model: str
) -> list[tuple[bytes, str]]:
    """The ``chunks.reindex`` records of stored chunk rows, keyed by document: ``ChunkCreated`` version 2 (the
    binary frame of :mod:`shared.chunk_wire`, as the parser writes ``chunks.created``) aimed at ``model``, with
    the token ids its tokenizer gave (``ids``, one list a row; None: the embedder tokenizes)."""
    from shared.chunk_wire import encode_chunk
    from shared.events import ChunkCreated

    return [
        (
            encode_chunk(
                ChunkCreated(
                    chunk_id=r["chunk_id"],
                    document_id=r["document_id"],
                    ordinal=r["ordinal"],
                    text=r["embedding_text"],
                    token_count=r["token_count"],
                    token_model=model if ids else None,
                    target_model=model,
                ),
                ids[j] if ids else None,
            ),
            r["document_id"],
        )
        for j, r in enumerate(rows)
    ]


async def reindex(args: argparse.Namespace) -> int:
    from cli._common import console, out, producer, publish_all
    from services.retriever.engine import create_index
    from services.retriever.engine.vector.tables import active_index, copy_vectors, index_name_with_precision
    from shared.db import create_pool
    from shared.embedding import EmbedderError, get_embedder, resolve
    from shared.embedding.passage_tokens import passage_tokenizer
    from shared.kafka.topics import CHUNKS_REINDEX
    from shared.settings import get_settings

    as_json = bool(getattr(args, "json", False))
    say = console.print if as_json else out.print  # with --json, stdout carries only the final JSON object
    settings = get_settings()
    emb_settings = settings.embedding.model_copy(update={"model": args.model})
    try:
        _, config = resolve(emb_settings)
        name = config.name
        dim = config.dim or get_embedder(emb_settings).dim  # a folder or hub model: load it to learn its dim
        tok = passage_tokenizer(emb_settings)
    except EmbedderError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2

    pool = await create_pool(settings.database)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    precision = settings.database.vector_precision
    try:
        active = await active_index(pool)
        same_model = active is not None and active.model == name and active.dim == dim
        if active is not None and same_model and active.precision == precision:
            target = active
            say(f"{name} is already the active index ({target.name}): embedding the chunks it lacks")
        else:
            index_name = await index_name_with_precision(pool, name, precision)
            target = await create_index(pool, name, dim, settings.database, name=index_name, activate=False)
            if target.state == "retired":  # an index of X from before a switch back: reuse its vectors
                await pool.execute("UPDATE vector_indexes SET state = 'building' WHERE name = $1", target.name)
            say(
                f"building index {target.name} for {name} ({dim}-d, {target.precision} precision) next to "
                f"{active.name + ' (' + active.model + ', ' + active.precision + ')' if active else 'no active index'}"
            )
        if active is not None and same_model and target is not active:
            # Only the precision changes: the stored vectors are converted, not embedded again. A first pass
            # copies the bulk while the retriever keeps writing; the second copies what it wrote meanwhile
            # with its writes held back, and switches in the same transaction.
            start = time.monotonic()
            await copy_vectors(pool, active, target)
            if not args.no_switch:
                await copy_vectors(pool, active, target, activate=True)
            count = int(await pool.fetchval(f"SELECT count(*) FROM {target.table_name}"))
            took = time.monotonic() - start
            if args.no_switch:
                say(f"{target.name} complete ({count} vectors copied, {took:.0f}s); not switched (--no-switch)")
            else:
                say(
                    f"switched: {target.name} ({name}, {target.precision} precision, {count} vectors copied from "
                    f"{active.name}) is active, {active.name} retired after {took:.0f}s. Restart the retriever, "
                    "then run this command again to embed chunks stored in between."
                )
            if as_json:
                switched_to = None if args.no_switch else target.name
                _print_summary(target.name, name, dim, count, took, switched_to, switched_to and active.name)
            return 0
        if args.spawn_embedder:
            log_path = Path(tempfile.mkstemp(prefix="evidentia-reindex-embedder-", suffix=".log")[1])
            proc = spawn_reindex_embedder(args.model, log_path)
            say(f"started a reindex embedder for {args.model} (pid {proc.pid}, log {log_path})")
        else:
            say(
                f"waiting for a reindex embedder: EVIDENTIA_EMBEDDING_MODEL={args.model} "
                "python -m services.embedder.reindex"
            )

        missing_sql = (
            f"SELECT c.chunk_id FROM chunks c LEFT JOIN {target.table_name} v USING (chunk_id) WHERE v.chunk_id IS NULL"
        )
        published: set[str] = set()
        start = time.monotonic()
        deadline = start + args.timeout
        best = None
        last_progress = start
        total = int(await pool.fetchval("SELECT count(*) FROM chunks"))
        async with producer(settings) as broker:
            while True:
                missing = [r["chunk_id"] for r in await pool.fetch(missing_sql)]
                if not missing:
                    break
                if best is None or len(missing) < best:
                    best, last_progress = len(missing), time.monotonic()
                elif time.monotonic() - last_progress > args.stall_s:
                    console.print(
                        f"[yellow]no progress for {args.stall_s:.0f}s: publishing the "
                        f"{len(missing)} missing chunks again (is a reindex embedder of {args.model} "
                        "running?)[/yellow]"
                    )
                    published.clear()
                    last_progress = time.monotonic()
                if proc is not None and proc.poll() is not None:
                    console.print(f"[red]the reindex embedder exited ({proc.returncode}); see {log_path}[/red]")
                    return 1
                todo = [c for c in missing if c not in published]
                for i in range(0, len(todo), args.batch):
                    rows = await pool.fetch(
                        "SELECT chunk_id, document_id, ordinal, embedding_text, token_count FROM chunks "
                        "WHERE chunk_id = ANY($1::text[])",
                        todo[i : i + args.batch],
                    )
                    ids = await asyncio.to_thread(tok, [r["embedding_text"] for r in rows]) if tok else None
                    frames = reindex_frames(rows, ids, name)
                    await publish_all(broker, {bytes: CHUNKS_REINDEX}, frames)
                    published.update(r["chunk_id"] for r in rows)
                done = total - len(missing)
                console.print(
                    f"{target.name}: {done}/{total} chunks embedded, {len(published)} published", highlight=False
                )
                if time.monotonic() > deadline:
                    console.print(f"[red]timed out with {len(missing)} chunks missing; nothing switched[/red]")
                    return 1
                await asyncio.sleep(args.poll_s)
                total = int(await pool.fetchval("SELECT count(*) FROM chunks"))

        count = int(await pool.fetchval(f"SELECT count(*) FROM {target.table_name}"))
        took = time.monotonic() - start
        switched_to = None
        if target.state == "active":
            say(f"{target.name} complete ({count} vectors, {took:.0f}s)")
        elif args.no_switch:
            say(f"{target.name} complete ({count} vectors, {took:.0f}s); not switched (--no-switch)")
        else:
            switched = await create_index(pool, name, dim, settings.database, name=target.name, activate=True)
            switched_to = switched.name
            say(
                f"switched: {switched.name} ({name}, {count} vectors) is active"
                + (f", {active.name} retired" if active else "")
                + f" after {took:.0f}s. Restart the services "
                f"with EVIDENTIA_EMBEDDING_MODEL={args.model}, then run this command again to embed chunks "
                "created in between."
            )
        if as_json:
            retired = active.name if switched_to and active else None
            _print_summary(target.name, name, dim, count, took, switched_to, retired)
        return 0
    finally:
        if proc is not None:
            _stop(proc)
        await pool.close()
