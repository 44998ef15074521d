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
    sha256: str | None = None,
    sha1: str | None = None,
    transport: httpx.BaseTransport | None = None,
    timeout_s: float = 60.0,
) -> Path:
    """``dest`` holding the bytes at ``url``, whose SHA-256 must be ``sha256`` (a pin) or, where no pin exists,
    whose SHA-1 must be ``sha1`` (what a Maven repository publishes beside each file). One of them is required.

    A file already at ``dest`` with the pinned SHA-256 is kept as it is (no request). The bytes go to a hidden
    ``.part`` file beside ``dest`` and replace it only once checked, so a failed or refused download never
    leaves a partial or wrong file where a good one is expected.
    """
    import httpx  # only here: not every service that imports shared installs httpx

    if sha256 is None and sha1 is None:
        raise ValueError("download_verified needs the SHA-256 or the SHA-1 to check the bytes against")
    if sha256 is not None and dest.exists() and sha256_of(dest) == sha256.lower():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    digest256, digest1 = hashlib.sha256(), hashlib.sha1(usedforsecurity=False)
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
                    digest256.update(block)
                    digest1.update(block)
    except httpx.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"GET {url} failed: {exc}") from exc
    except DownloadError:
        tmp.unlink(missing_ok=True)
        raise
    if sha256 is not None and digest256.hexdigest() != sha256.lower():
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"{url}: SHA-256 {digest256.hexdigest()} is not the pinned {sha256.lower()}; refused.")
    if sha256 is None and sha1 is not None and digest1.hexdigest() != sha1.lower():
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"{url}: SHA-1 {digest1.hexdigest()} differs from the repository's {sha1.lower()}.")
    tmp.replace(dest)
    return dest


def published_sha1(url: str, *, transport: httpx.BaseTransport | None = None, timeout_s: float = 60.0) -> str:
    """The SHA-1 a Maven repository publishes for the file at ``url`` (``<url>.sha1``)."""
    import httpx

    try:
        with httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=True) as client:
            answer = client.get(url + ".sha1")
    except httpx.HTTPError as exc:
        raise DownloadError(f"GET {url}.sha1 failed: {exc}") from exc
    if answer.status_code != 200:
        raise DownloadError(f"GET {url}.sha1 answered {answer.status_code}: the file cannot be checked.")
    return answer.text.split()[0].strip().lower() if answer.text.strip() else ""
