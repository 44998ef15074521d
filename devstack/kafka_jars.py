"""Kafka's jars without Maven: the classpath ``infra/kafka/pom.xml`` resolves, pinned in
``infra/kafka/jars.lock`` (one line per jar: its path in Maven Central's layout, SHA-256 and size), downloaded
over HTTPS and checked against those digests.

Maven stays the way the lock is made and the way jars are fetched where it is installed
(:meth:`devstack.kafka.LocalKafka.ensure_libs`); the lock records the pom's own SHA-256, so a pom edited
without re-locking (``python -m devstack kafka lock-jars``, which needs Maven once) is refused rather than
served a stale classpath. ``EVIDENTIA_MAVEN_URL`` points the download at a mirror of Maven Central.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from devstack.common import DevstackError
from shared.downloads import MAVEN_CENTRAL, DownloadError, download_verified, sha256_of

if TYPE_CHECKING:
    import httpx

#: Environment variable naming a Maven Central mirror (same layout) for the jars.
MAVEN_URL_ENV = "EVIDENTIA_MAVEN_URL"

_POM_LINE = "# pom-sha256 "


@dataclass(frozen=True)
class PinnedJar:
    """One jar of the broker's classpath: where it lives in a Maven repository, and what it must hash to."""

    path: str  # e.g. org/apache/kafka/kafka_2.13/4.4.0/kafka_2.13-4.4.0.jar
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class JarLock:
    """``infra/kafka/jars.lock``: the pom it was made from and the jars it resolved to."""

    pom_sha256: str
    jars: tuple[PinnedJar, ...]

    @property
    def total_bytes(self) -> int:
        return sum(jar.size for jar in self.jars)

    def render(self) -> str:
        lines = [
            "# Kafka's classpath for the dev broker, pinned: path in Maven Central's layout, SHA-256, bytes.",
            "# Made from infra/kafka/pom.xml with `python -m devstack kafka lock-jars` (needs Maven once).",
            f"{_POM_LINE}{self.pom_sha256}",
        ]
        lines += [f"{jar.path} {jar.sha256} {jar.size}" for jar in sorted(self.jars, key=lambda j: j.path)]
        return "\n".join(lines) + "\n"


def parse_lock(text: str) -> JarLock:
    """Read a lock; a malformed line is an error naming it."""
    pom = ""
    jars: list[PinnedJar] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith(_POM_LINE):
            pom = line[len(_POM_LINE) :].strip()
            continue
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or len(parts[1]) != 64 or not parts[2].isdigit() or not parts[0].endswith(".jar"):
            raise DevstackError(f"jars.lock line {number} is not '<path> <sha256> <bytes>': {raw!r}")
        jars.append(PinnedJar(parts[0], parts[1].lower(), int(parts[2])))
    if len(pom) != 64 or not jars:
        raise DevstackError("jars.lock has no '# pom-sha256' line or no jars")
    return JarLock(pom, tuple(jars))


def read_lock(path: Path) -> JarLock:
    try:
        return parse_lock(path.read_text())
    except OSError as exc:
        raise DevstackError(f"cannot read {path}: {exc}") from exc


def pom_sha256(pom: Path) -> str:
    try:
        return hashlib.sha256(pom.read_bytes()).hexdigest()
    except OSError as exc:
        raise DevstackError(f"cannot read the Kafka pom {pom}: {exc}") from exc


def download_jars(
    lock: JarLock,
    pom: Path,
    dest: Path,
    *,
    base_url: str | None = None,
    say: Callable[[str], None] = print,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """Download every jar of ``lock`` into ``dest`` (a new folder), each checked against its SHA-256.

    Refuses a lock made from another pom than ``pom``: the classpath would not be the one the pom asks for.
    """
    current = pom_sha256(pom)
    if lock.pom_sha256 != current:
        raise DevstackError(
            f"infra/kafka/jars.lock was made from another {pom.name} (SHA-256 {lock.pom_sha256[:12]}..., the pom "
            f"is now {current[:12]}...): re-lock with Maven (`python -m devstack kafka lock-jars`), or install "
            "Maven to resolve the pom directly."
        )
    url = (base_url or os.environ.get(MAVEN_URL_ENV) or MAVEN_CENTRAL).rstrip("/")
    say(f"fetching Kafka's {len(lock.jars)} jars ({lock.total_bytes / 1e6:.1f} MB) from {url}, SHA-256 pinned")
    dest.mkdir(parents=True, exist_ok=True)
    for jar in lock.jars:
        try:
            download_verified(f"{url}/{jar.path}", dest / jar.name, sha256=jar.sha256, transport=transport)
        except DownloadError as exc:
            raise DevstackError(str(exc)) from exc


def lock_from_repository(libs: Path, maven_repo: Path, pom: Path) -> JarLock:
    """The lock for the jars Maven copied into ``libs``, each located in the local Maven repository
    ``maven_repo`` (which gives its group path)."""
    jars: list[PinnedJar] = []
    for jar in sorted(libs.glob("*.jar")):
        digest = sha256_of(jar)
        matches = [p for p in sorted(maven_repo.rglob(jar.name)) if sha256_of(p) == digest]
        if not matches:
            raise DevstackError(f"{jar.name} is not in the Maven repository {maven_repo}")
        jars.append(PinnedJar(matches[0].relative_to(maven_repo).as_posix(), digest, jar.stat().st_size))
    if not jars:
        raise DevstackError(f"no jars in {libs}")
    return JarLock(pom_sha256(pom), tuple(jars))
