"""``evidentia topics create|list``: create Evidentia's topics with their partitions and retention."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("topics", help="Kafka topics.")
    p.add_argument("action", choices=["create", "list"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shared.topics import ensure_topics, standard_topics

    k = get_settings().kafka
    specs = standard_topics(k.topic_partitions)
    if args.action == "create":
        created = asyncio.run(ensure_topics(k, specs, k.replication_factor))
        print(f"created {len(created)} topics" + (f": {', '.join(created)}" if created else ""))
    else:
        for s in specs:
            print(f"{s.name}\t{s.partitions} partitions\t{s.config}")
    return 0
