"""``evidentia bulk status|finish``: where a bulk load stands, and its finish run by hand.

A bulk load (``services/retriever/engine/bulk.py``) writes chunks with their lexical postings deferred and the
vector table without its ANN index. ``status`` prints what searches do meanwhile; ``finish`` indexes every
chunk still without postings and builds the ANN index (parallel maintenance workers), then compacts: what a
load cut short leaves for later, or a store whose postings were deferred by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from typing import Any

from cli._common import console, out


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bulk", help="Bulk loads: status, and the finish (deferred postings, ANN index).")
    p.add_argument("action", choices=["status", "finish"])
    p.add_argument("--workers", type=int, default=1, help="Parallel maintenance workers of the ANN build.")
    p.add_argument("--maintenance-work-mem", default="1GB", help="Memory of the ANN build (hold the graph).")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(bulk(args))


async def bulk(args: argparse.Namespace) -> int:
    from services.retriever.engine import bulk as bulk_store
    from services.retriever.engine.vector.tables import active_index
    from shared.db import create_pool
    from shared.settings import get_settings

    db = get_settings().database.model_copy(update={"statement_timeout_s": 0})
    pool = await create_pool(db)
    try:
        index = await active_index(pool)
        if index is None:
            console.print("[red]no active vector index: nothing was loaded yet[/red]")
            return 2
        result: dict[str, Any]
        if args.action == "finish":
            try:
                done = await bulk_store.finish_left_load(
                    pool, index, db, workers=args.workers, maintenance_work_mem=args.maintenance_work_mem
                )
            except bulk_store.BulkLoadBusy as exc:
                console.print(f"[red]{exc}[/red]")
                return 3
            result = asdict(done)
        else:
            status = await bulk_store.bulk_load_status(pool, index)
            result = {**asdict(status), "searches": status.searches}
    finally:
        await pool.close()
    if getattr(args, "json", False):
        print(json.dumps(result))
    else:
        for key, value in result.items():
            out.print(f"{key}: {value}")
    return 0
