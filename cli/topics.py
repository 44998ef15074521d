"""``evidentia topics create|list``: create Evidentia's topics with their partitions and retention."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("topics", help="Kafka topics.")
    p.add_argument("action", choices=["create", "list"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    k = get_settings().kafka
    specs = standard_topics(k.topic_partitions)
    as_json = bool(getattr(args, "json", False))
    if args.action == "create":
        created = asyncio.run(ensure_topics(k, specs, k.replication_factor))
        if as_json:
            print(json.dumps({"created": created}))
        else:
            print(f"created {len(created)} topics" + (f": {', '.join(created)}" if created else ""))
    elif as_json:
        rows = [{"name": s.name, "partitions": s.partitions, "config": s.config} for s in specs]
        print(json.dumps(rows, indent=2))
    else:
        for s in specs:
            print(f"{s.name}\t{s.partitions} partitions\t{s.config}")
    return 0
