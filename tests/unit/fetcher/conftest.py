"""Fixtures of the fetcher tests: the fake E-utilities server and clients pointed at it."""

from __future__ import annotations

import sys
from pathlib import Path

# ``tests.fakes`` is imported by package name; the repository root is not on sys.path when pytest
# runs as ``.venv/bin/pytest`` (``pythonpath = ["."]`` in pytest's settings would make this moot).
_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
