"""``evidentia settings``: print every setting (Markdown table) or the current values."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("settings", help="List every EVIDENTIA_* setting.")
    p.add_argument(
        "--current", action="store_true", help="Print the values in force as JSON (secrets and URL passwords masked)."
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shared.settings import get_settings, settings_markdown, settings_table

    if args.current:
        print(json.dumps(get_settings().public_dump(), indent=2))
    elif getattr(args, "json", False):
        rows = [{"variable": v, "default": d, "meaning": m} for v, d, m in settings_table()]
        print(json.dumps(rows, indent=2))
    else:
        print(settings_markdown(), end="")
    return 0
