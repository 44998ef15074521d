"""The installed version of Evidentia (``evidentia --version``, the CLI's User-Agent)."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version


@lru_cache(maxsize=1)
def cli_version() -> str:
    try:
        return version("evidentia")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
