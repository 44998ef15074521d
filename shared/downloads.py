"""Files fetched over HTTPS and kept only when their SHA-256 is the pinned one.

One owner for "download, check, then keep": the model jars (:mod:`shared.embedding.fetch`) and the dev broker's
Kafka jars (:mod:`devstack.kafka_jars`) both come from Maven Central this way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

#: Maven Central's repository root (the layout ``group/path/artifact/version/artifact-version.jar``).
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


class DownloadError(RuntimeError):
    """A download failed or its bytes were not the pinned ones; the message says which and why."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_verified(
    url: str,
    dest: Path,
    *,
    sha256: str,
    transport: httpx.BaseTransport | None = None,
    timeout_s: float = 60.0,
) -> Path:
    """``dest`` holding the bytes at ``url``, whose SHA-256 must be ``sha256``.

    A file already at ``dest`` with that digest is kept as it is (no request). The bytes go to a hidden
    ``.part`` file beside ``dest`` and replace it only once checked, so a failed or refused download never
    leaves a partial or wrong file where a good one is expected.
    """
    import httpx  # only here: not every service that imports shared installs httpx

    expected = sha256.lower()
    if dest.exists() and sha256_of(dest) == expected:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    digest = hashlib.sha256()
    try:
        with (
            httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=True) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise DownloadError(f"GET {url} answered {response.status_code}.")
            with tmp.open("wb") as fh:
                for block in response.iter_bytes(1 << 20):
                    fh.write(block)
                    digest.update(block)
    except httpx.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"GET {url} failed: {exc}") from exc
    except DownloadError:
        tmp.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != expected:
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"{url}: SHA-256 {digest.hexdigest()} is not the pinned {expected}; refused.")
    tmp.replace(dest)
    return dest
