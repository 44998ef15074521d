"""``evidentia dlq list|show|replay TOPIC``: inspect dead letters and send chosen ones back to their topic.

TOPIC is a pipeline topic (``documents.fetched``) or its dead-letter topic (``documents.fetched.dlq``).
A letter is named by its place in the dead-letter topic, ``PARTITION:OFFSET`` (or just ``OFFSET`` for
partition 0), as ``list`` prints it. ``replay`` sends the original event back with its key and headers,
once the cause is fixed; replays are recorded in the database so a letter is not replayed twice by
accident (``--force`` replays it again). The gateway offers the same under ``/v1/admin/dlq``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("dlq", help="Dead letters: list, show, replay.")
    sub = p.add_subparsers(dest="dlq_action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="List the dead letters of TOPIC (oldest first).")
    ls.add_argument("topic")
    ls.add_argument("--limit", type=int, default=100)
    ls.add_argument("--json", action="store_true", help="One JSON object per line.")
    show = sub.add_parser("show", help="Show whole dead letters (error, origin, payload).")
    show.add_argument("topic")
    show.add_argument("refs", nargs="+", metavar="PARTITION:OFFSET")
    rp = sub.add_parser("replay", help="Send dead letters back to their original topic.")
    rp.add_argument("topic")
    rp.add_argument("refs", nargs="*", metavar="PARTITION:OFFSET")
    rp.add_argument("--all", action="store_true", help="Every letter not replayed yet.")
    rp.add_argument("--error-type", help="With --all: only letters of this error type.")
    rp.add_argument("--force", action="store_true", help="Replay letters replayed before, too.")
    rp.add_argument("--dry-run", action="store_true", help="Say what would be replayed; send nothing.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from shared.db import create_pool
    from shared.kafka import dlq

    settings = get_settings()
    kafka = settings.kafka
    topic = dlq.dlq_topic_of(args.topic)
    pool = await create_pool(settings.database)
    try:
        if args.dlq_action == "list":
            views = await dlq.mark_replayed(pool, await dlq.read_letters(kafka, topic, limit=args.limit))
            if args.json:
                for v in views:
                    print(json.dumps(dlq.summary(v)))
            else:
                print(f"{len(views)} dead letters in {topic}")
                for v in views:
                    s = dlq.summary(v)
                    mark = " [replayed]" if v.replayed else ""
                    print(f"{s['ref']}\t{s['key']}\t{s['service']}\t{s['error_type']}: {s['error'][:120]}{mark}")
            return 0
        if args.dlq_action == "show":
            refs = [dlq.parse_ref(r) for r in args.refs]
            views = await dlq.mark_replayed(pool, await dlq.read_letters(kafka, topic, refs=refs))
            if not views:
                print(f"no such dead letter in {topic}: {' '.join(args.refs)}")
                return 1
            for v in views:
                print(json.dumps({"ref": v.ref, "replayed": v.replayed, **v.letter.model_dump(mode="json")}, indent=2))
            return 0
        outcomes = dlq.replay_chosen(
            kafka,
            topic,
            pool=pool,
            refs=args.refs,
            every=args.all,
            error_type=args.error_type,
            force=args.force,
            dry_run=args.dry_run,
        )  # paged: a topic of any size is replayed holding one page of letters at a time
        replayed = total = refused = 0
        try:
            async for o in outcomes:
                total += 1
                replayed += o.status == "replayed"
                refused += o.status == "refused"
                if o.status == "would replay":
                    print(f"would replay {o.ref} -> {o.topic} ({o.detail})")
                else:
                    print(f"{o.ref}\t{o.status}\t{o.topic}" + (f"\t{o.detail}" if o.detail else ""))
        except (LookupError, ValueError) as exc:
            print(f"error: {exc}")
            return 2
        if not args.dry_run:
            print(f"replayed {replayed} of {total}")
        return 0 if not refused else 1
    finally:
        await pool.close()
