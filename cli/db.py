"""``evidentia db migrate|status``: apply or list the numbered SQL migrations."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from shared.settings import get_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("db", help="Database migrations.")
    p.add_argument("action", choices=["migrate", "status"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shared.db import list_migrations, migrate

    as_json = bool(getattr(args, "json", False))
    url = get_settings().database.url
    if args.action == "migrate":
        applied = asyncio.run(migrate(url))
        if as_json:
            print(json.dumps({"applied": applied}))
        else:
            print(f"applied {applied}" if applied else "database is up to date")
    elif as_json:
        print(json.dumps([{"version": m.version, "name": m.name} for m in list_migrations()], indent=2))
    else:
        for m in list_migrations():
            print(f"{m.version:03d} {m.name}")
    return 0
