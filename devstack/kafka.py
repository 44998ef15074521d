"""A single-node Apache Kafka broker (KRaft, combined broker + controller) run from Maven jars.

Kafka is not packaged for Debian and its release archive is unreachable from CI, but Maven
Central carries ``org.apache.kafka:kafka_2.13``.  ``infra/kafka/pom.xml`` resolves the broker's
classpath into ``<repo>/.cache/kafka/libs`` once (with Maven where it is installed, else from the
pinned ``infra/kafka/jars.lock`` over HTTPS: :mod:`devstack.kafka_jars`); :class:`LocalKafka` then
formats a data directory once and runs ``java -cp 'libs/*' kafka.Kafka server.properties`` detached
(on the Java :func:`devstack.java.find_java` picks), so the broker outlives the command that started
it and keeps its topics across restarts.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devstack.common import (
    DevstackError,
    pid_alive,
    pid_cmdline,
    port_accepts,
    read_pid,
    repo_root,
    tail,
)
from devstack.java import find_java
from devstack.kafka_jars import JarLock, download_jars, lock_from_repository, read_lock
from devstack.kafka_tls import BrokerTls

#: The Kafka release ``infra/kafka/pom.xml`` pins; docker-compose.yml uses the same image tag.
KAFKA_VERSION = "4.4.0"

#: Cheap JVM flags for a dev broker on a small machine: serial GC and the C1 compiler only
#: start noticeably faster than the G1/C2 defaults and a dev broker never needs C2's peak speed.
DEFAULT_JVM_OPTS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)

#: SASL mechanisms of the optional SASL_SSL listener (the ones ``EVIDENTIA_KAFKA_SASL_MECHANISM`` offers).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: SASL user names and passwords end up in a JAAS line and a StorageTool argument: no quoting needed.
_SAFE_CREDENTIAL = re.compile(r"[A-Za-z0-9._-]{1,128}")

#: Maven colours its messages even in batch mode; error messages drop the escape codes.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")

_LOG4J2_PROPERTIES = """\
# Written by devstack/kafka.py on every start; edit there.
status = warn
name = evidentia-dev-kafka
# Kafka logs its own orderly shutdown from a JVM shutdown hook; log4j must not stop first.
shutdownHook = disable
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
# Per-request and per-partition chatter stays out of the dev log.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.clientcfg.name = org.apache.kafka.common.config.AbstractConfig
logger.clientcfg.level = WARN
"""


@dataclass(frozen=True)
class KafkaStatus:
    """What :meth:`LocalKafka.status` found."""

    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path

    def describe(self) -> str:
        if self.running:
            return f"kafka: running (pid {self.pid}) at {self.bootstrap}, data in {self.data_dir}"
        return f"kafka: stopped (would listen on {self.bootstrap}), data in {self.data_dir}"


class LocalKafka:
    """One dev Kafka broker whose state lives in ``data_dir``.

    Files under ``data_dir``: ``server.properties`` and ``log4j2.properties`` (rewritten on every
    start), ``kraft/`` (the formatted log directory), ``kafka.log`` (broker output, the previous
    run's kept as ``kafka.log.1``), ``kafka.pid`` and ``cluster.id``.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        controller_port: int = 9093,
        libs_dir: Path | None = None,
        pom: Path | None = None,
        heap_opts: str | None = None,
        node_id: int = 1,
        sasl_ssl_port: int | None = None,
        tls: BrokerTls | None = None,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self.libs_dir = (libs_dir or repo_root() / ".cache" / "kafka" / "libs").resolve()
        self.pom = (pom or repo_root() / "infra" / "kafka" / "pom.xml").resolve()
        # KAFKA_HEAP_OPTS is what Kafka's own start scripts read; honour it the same way.
        self.heap_opts = heap_opts or os.environ.get("KAFKA_HEAP_OPTS") or "-Xms128m -Xmx512m"
        self.node_id = node_id
        # An optional SASL_SSL listener next to the plaintext one (which the broker itself and the readiness
        # probe use): TLS from ``tls`` (devstack.kafka_tls), users for PLAIN and SCRAM-SHA-256/512.
        if sasl_ssl_port is not None and tls is None:
            raise DevstackError("a SASL_SSL listener needs TLS material (devstack.kafka_tls.make_broker_tls)")
        self.sasl_ssl_port = sasl_ssl_port
        self.tls = tls
        self.sasl_users = dict(sasl_users or {})
        for name, password in self.sasl_users.items():
            if not _SAFE_CREDENTIAL.fullmatch(name) or not _SAFE_CREDENTIAL.fullmatch(password):
                raise DevstackError(f"SASL user {name!r}: names and passwords may use only [A-Za-z0-9._-]")
        self._proc: subprocess.Popen[bytes] | None = None

    # ---------------------------------------------------------------- paths and addresses
    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients (``EVIDENTIA_KAFKA_BOOTSTRAP``)."""
        return f"{self.host}:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        """``host:port`` of the SASL_SSL listener, when there is one."""
        return f"{self.host}:{self.sasl_ssl_port}" if self.sasl_ssl_port is not None else None

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def server_properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.data_dir / "log4j2.properties"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "kafka.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "kafka.pid"

    @property
    def _libs_stamp(self) -> Path:
        return self.libs_dir / ".complete"

    # ---------------------------------------------------------------- classpath
    def _pom_digest(self) -> str:
        try:
            return hashlib.sha256(self.pom.read_bytes()).hexdigest()
        except OSError as exc:
            raise DevstackError(f"cannot read the Kafka pom {self.pom}: {exc}") from exc

    def libs_ready(self) -> bool:
        """True when ``libs_dir`` holds the jars the current pom resolves to."""
        try:
            return self._libs_stamp.read_text().strip() == self._pom_digest()
        except OSError:
            return False

    def ensure_libs(self) -> bool:
        """Put the broker's jars in ``libs_dir`` unless they are already there: resolved by Maven when ``mvn``
        is on PATH, else downloaded from the pinned ``jars.lock`` beside the pom.

        Returns True when it fetched.  A changed pom (say, a version bump) fetches afresh into a new
        directory that replaces the old one only once every jar is in.
        """
        if self.libs_ready():
            return False
        digest = self._pom_digest()
        staging = self.libs_dir.with_name(self.libs_dir.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            mvn = shutil.which("mvn")
            if mvn is not None:
                self._maven_copy(mvn, staging)
            else:
                download_jars(read_lock(self.jar_lock), self.pom, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (staging / ".complete").write_text(digest + "\n")
        shutil.rmtree(self.libs_dir, ignore_errors=True)
        staging.rename(self.libs_dir)
        return True

    @property
    def jar_lock(self) -> Path:
        """The pinned classpath beside the pom (``infra/kafka/jars.lock``)."""
        return self.pom.with_name("jars.lock")

    def lock_jars(self, maven_repo: Path | None = None) -> JarLock:
        """Resolve the pom with Maven and write ``jars.lock`` from what it resolved (``maven_repo``: Maven's
        local repository, default ``~/.m2/repository``, which gives each jar's path in Maven Central)."""
        mvn = shutil.which("mvn")
        if mvn is None:
            raise DevstackError("making jars.lock needs Maven ('mvn') on PATH once")
        with tempfile.TemporaryDirectory() as tmp:
            self._maven_copy(mvn, Path(tmp))
            lock = lock_from_repository(Path(tmp), maven_repo or Path.home() / ".m2" / "repository", self.pom)
        self.jar_lock.write_text(lock.render())
        return lock

    def _maven_copy(self, mvn: str, dest: Path) -> None:
        cmd = [
            mvn, "-B", "-q", "-f", str(self.pom),
            "dependency:copy-dependencies", f"-DoutputDirectory={dest}",
        ]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not any(dest.glob("kafka_2.13-*.jar")):
            output = _ANSI_ESCAPE.sub("", result.stdout + result.stderr).strip()[-3000:]
            raise DevstackError(
                f"Maven could not resolve Kafka's jars (exit {result.returncode}): {shlex.join(cmd)}\n{output}"
            )

    # ---------------------------------------------------------------- configuration
    def render_server_properties(self) -> str:
        """The broker's ``server.properties``: one node acting as broker and KRaft controller."""
        settings: dict[str, str | int] = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # Topics appear on first use, three partitions each so consumer groups can scale to 3.
            "auto.create.topics.enable": "true",
            "num.partitions": 3,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            # Internal topics on a single node: replication factor 1 and few partitions, which
            # makes the first consumer-group join (it creates __consumer_offsets) quick.
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 6,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 6,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            # No waiting for more members before the first rebalance: tests join groups at once.
            "group.initial.rebalance.delay.ms": 0,
            # Full-text articles can exceed the 1 MiB default record batch.
            "message.max.bytes": 10 * 1024 * 1024,
            # Dev retention: three days or 1 GiB per partition, in 128 MiB segments.
            "log.retention.hours": 72,
            "log.retention.bytes": 1024 * 1024 * 1024,
            "log.segment.bytes": 128 * 1024 * 1024,
            "log.retention.check.interval.ms": 300_000,
            # After a crash (kill -9) the restarted broker may only register once its old session
            # has expired: 4.5 s instead of the default 9 s, still far above any GC pause here.
            "broker.heartbeat.interval.ms": 1000,
            "broker.session.timeout.ms": 4500,
            # Two cores: keep the thread pools small.
            "num.network.threads": 2,
            "num.io.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
        }
        if self.sasl_ssl_port is not None and self.tls is not None:
            settings.update(self._sasl_ssl_settings(self.sasl_ssl_port, self.tls))
        lines = ["# Written by devstack/kafka.py on every start; edit there."]
        lines += [f"{key}={value}" for key, value in settings.items()]
        return "\n".join(lines) + "\n"

    def _sasl_ssl_settings(self, port: int, tls: BrokerTls) -> dict[str, str | int]:
        """A SASL_SSL listener: TLS with the keystore, SASL PLAIN and SCRAM-SHA-256/512 for ``sasl_users``.

        PLAIN users are listed in the listener's JAAS line; SCRAM credentials live in the cluster metadata,
        written when the storage is formatted (:meth:`_format`).
        """
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in self.sasl_users.items())
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "listeners": f"PLAINTEXT://{self.host}:{self.port},SASL_SSL://{self.host}:{port},"
            f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port},SASL_SSL://{self.host}:{port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(tls.keystore),
            "ssl.keystore.password": tls.password,
            "ssl.key.password": tls.password,
            "ssl.client.auth": "none",
        }

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.server_properties.write_text(self.render_server_properties())
        self.log4j_properties.write_text(_LOG4J2_PROPERTIES)

    def is_formatted(self) -> bool:
        return (self.log_dir / "meta.properties").exists()

    @staticmethod
    def new_cluster_id() -> str:
        """A Kafka ``Uuid`` string: 16 random bytes, URL-safe base64 without padding.

        Kafka's own generator rejects ids starting with '-' (they read as a CLI flag); so do we.
        """
        while True:
            text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            if not text.startswith("-"):
                return text

    def _format(self, java: str) -> None:
        cluster_id_file = self.data_dir / "cluster.id"
        cluster_id = cluster_id_file.read_text().strip() if cluster_id_file.exists() else ""
        if not cluster_id:
            cluster_id = self.new_cluster_id()
            cluster_id_file.write_text(cluster_id + "\n")
        cmd = [
            java, *self.heap_opts.split(), *DEFAULT_JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.log4j_properties}",
            "-cp", str(self.libs_dir / "*"), "kafka.tools.StorageTool",
            "format", "-t", cluster_id, "-c", str(self.server_properties), "--ignore-formatted",
        ]  # fmt: skip
        for name, password in self.sasl_users.items() if self.sasl_ssl_port is not None else ():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                cmd += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not self.is_formatted():
            output = (result.stdout + result.stderr).strip()[-3000:]
            raise DevstackError(f"formatting Kafka storage in {self.log_dir} failed:\n{output}")

    # ---------------------------------------------------------------- process state
    def _pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        if pid is None:
            return None
        if self._proc is not None and self._proc.pid == pid:
            # Our own child: alive or not, Popen knows. (Right after Popen, before the child's exec,
            # its command line is still Python's, so the check below would call a starting broker
            # dead: seen as "the Kafka broker exited during start-up" with no exit code.)
            return pid if self._proc.poll() is None else None
        if not pid_alive(pid):
            return None
        # Guard against a recycled pid: it must be a Kafka broker using this data directory.
        cmdline = pid_cmdline(pid)
        if "kafka.Kafka" not in cmdline or str(self.server_properties) not in cmdline:
            return None
        return pid

    def is_running(self) -> bool:
        """True when the broker process recorded in the pid file is alive."""
        return self._pid() is not None

    def status(self) -> KafkaStatus:
        pid = self._pid()
        return KafkaStatus(running=pid is not None, pid=pid, bootstrap=self.bootstrap, data_dir=self.data_dir)

    # ---------------------------------------------------------------- lifecycle
    def start(self, *, wait: bool = True, timeout: float = 90.0) -> bool:
        """Start the broker (fetching jars and formatting storage the first time).

        Returns False when a broker was already running on this data directory and answering,
        in which case it is reused; True when a new process was launched.  With ``wait`` (the
        default) it returns only once the broker answers metadata requests.
        """
        if self.is_running():
            if self.wait_ready(timeout=timeout if wait else 5.0):
                return False
            raise DevstackError(
                f"a Kafka process (pid {self._pid()}) runs on {self.data_dir} but does not answer on "
                f"{self.bootstrap}; stop it first (python -m devstack kafka stop).\n"
                f"Last lines of {self.log_file}:\n{tail(self.log_file)}"
            )
        self.pid_file.unlink(missing_ok=True)
        for port in (self.port, self.controller_port):
            if port_accepts(self.host, port):
                raise DevstackError(
                    f"port {self.host}:{port} is already in use by another process; "
                    "stop it or choose other ports (--kafka-port / --kafka-controller-port)."
                )
        java = find_java().java
        self.ensure_libs()
        self._write_config()
        if not self.is_formatted():
            self._format(java)
        if self.log_file.exists():
            self.log_file.replace(self.log_file.with_name(self.log_file.name + ".1"))
        for attempt in (1, 2):
            self._launch(java)
            if not wait:
                return True
            try:
                if self.wait_ready(timeout=timeout):
                    return True
            except DevstackError:
                # Killed by a signal before it could even log (seen only under heavy parallel test
                # load): one more try.  Any other early exit is a real error and is reported.
                code = self._proc.poll() if self._proc is not None else None
                if attempt == 1 and code is not None and code < 0:
                    with self.log_file.open("a") as log:
                        log.write(f"# devstack: broker killed by signal {-code} during start-up; relaunching\n")
                    continue
                raise
            self.stop()
            raise DevstackError(
                f"Kafka did not become ready on {self.bootstrap} within {timeout:.0f}s.\n"
                f"Last lines of {self.log_file}:\n{tail(self.log_file)}"
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self, java: str) -> None:
        cmd = [
            java, *self.heap_opts.split(), *DEFAULT_JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.log4j_properties}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp", str(self.libs_dir / "*"), "kafka.Kafka", str(self.server_properties),
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            # A session of its own: Ctrl-C in the starting shell does not reach the broker, and
            # stop() can signal the whole group.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Poll until the broker answers a metadata request listing itself; False on timeout.

        Raises :class:`DevstackError` at once if the broker process has died.
        """
        deadline = time.monotonic() + timeout
        while True:
            if not self.is_running():
                code = self._proc.poll() if self._proc is not None else None
                how = "" if code is None else f" (killed by signal {-code})" if code < 0 else f" (exit {code})"
                raise DevstackError(
                    f"the Kafka broker exited during start-up{how}.\nLast lines of {self.log_file}:\n"
                    f"{tail(self.log_file)}"
                )
            if port_accepts(self.host, self.port) and self._metadata_ok():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)

    def _metadata_ok(self) -> bool:
        # The probe runs on a private event loop in a worker thread, so wait_ready() works the
        # same from plain code and from inside a running event loop (pytest-asyncio, FastStream).
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self._probe_metadata()).result()

    async def _probe_metadata(self) -> bool:
        from aiokafka.admin import AIOKafkaAdminClient

        aiokafka_log = logging.getLogger("aiokafka")
        previous = aiokafka_log.level
        aiokafka_log.setLevel(logging.CRITICAL)  # connection errors while starting are expected
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
        try:
            await asyncio.wait_for(admin.start(), timeout=5)
            cluster = await asyncio.wait_for(admin.describe_cluster(), timeout=5)
            return bool(cluster.get("brokers"))
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
            aiokafka_log.setLevel(previous)

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM the broker (a clean, controlled shutdown), SIGKILL it after ``timeout``.

        Returns True when a running broker was stopped, False when none was running.
        """
        pid = self._pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        self._signal(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            self._signal(pid, signal.SIGKILL)
            self._wait_exit(pid, 10.0)
        self.pid_file.unlink(missing_ok=True)
        return True

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pid, sig)  # the broker leads its own process group (start_new_session)
        except ProcessLookupError:
            return
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            time.sleep(0.1)
        return False
