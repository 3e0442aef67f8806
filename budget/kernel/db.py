"""Engine factory: the one module that knows SQLite specifics.

Everything else talks portable SQLAlchemy. For SQLite this module turns on WAL
(readers never block the writer), ``synchronous=NORMAL``, a busy timeout (``database is
locked`` must never reach a user) and foreign keys, and creates the database folder.

``synchronous=NORMAL`` in WAL mode: a commit is written to the WAL before it returns
(it survives a process crash, kill -9 included) but not fsync'd (an OS crash or power
cut may lose it). The bot's tables (intake, history, profiles, counters) need no more:
the ledger's writer fsyncs the WAL after every granted hold (its durable steps), and
that fsync of the one sequential WAL also makes durable every frame written before it —
a message's intake record included, which is committed before the message's first
hold. The ledger's own connection is set up in :mod:`budget.kernel.sqlite_writer`.
Other backends (PostgreSQL via DATABASE_URL) get the plain engine.

A PostgreSQL URL names its server one of two ways (:func:`server_address`): a TCP host
(``postgresql+asyncpg://user:password@db.example.org:5432/kopek``) or a Unix socket
folder in the query, SQLAlchemy's and asyncpg's form for a server on the same machine
(peer authentication) or a managed database's socket proxy
(``postgresql+asyncpg://user@/kopek?host=/run/postgresql``, optionally ``&port=5433``:
the socket file is ``/run/postgresql/.s.PGSQL.5433``). Settings, ``python -m budget``
and every line that names a database (:func:`location`) read it through that one
function.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = [
    "BUSY_TIMEOUT_MS",
    "ServerAddress",
    "check_credentials",
    "create_engine",
    "failure_reason",
    "is_sqlite",
    "location",
    "make_ddl_transactional",
    "passwords",
    "server_address",
    "sqlite_path",
]

#: How long a SQLite connection waits for the write lock (milliseconds).
BUSY_TIMEOUT_MS = 15_000


def is_sqlite(url: str | URL) -> bool:
    """True when ``url`` names a SQLite database."""
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str | URL) -> Path | None:
    """The database file of a SQLite URL (``None`` for in-memory or other backends)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


#: A URL's ``user:password`` as one reading only allows it: one ``:`` between the two,
#: and no raw ``@ : / ? # [ ]`` or ``%`` (other than a ``%XX`` escape) inside either.
_USERINFO_PART = r"(?:[^:@/?#\[\]%]|%[0-9A-Fa-f]{2})*"
_USERINFO = re.compile(rf"{_USERINFO_PART}(?::{_USERINFO_PART})?")

#: Says what to write instead; it never holds any piece of the URL (it may hold a password).
_CREDENTIALS_HINT = (
    "cannot read the user and password one way only: percent-encode @ : / # ? [ ] and % "
    "in them (@ is %40, : is %3A, / is %2F, # is %23, ? is %3F, % is %25)"
)


def check_credentials(url: str) -> None:
    """Refuse a server URL (``scheme://user:password@host:port/database``) whose user and
    password could be cut in more than one way.

    A raw ``@ / # ?`` in a password moves where parsers end it: SQLAlchemy reads
    ``u:hun@ter/22secret@db/kopek`` as the host ``ter`` and the database
    ``22secret@db/kopek``, so a later "cannot reach" line would print part of the password
    and a DNS look-up would go out for it. Refused here, before any parser sees the URL:
    an ``@`` anywhere after the host, a second raw ``:``, a raw ``@ / ? # [ ]``, or a ``%``
    that starts no ``%XX`` escape inside the user or password. Percent-encoded forms
    (``p%40ss%2Fword``) pass. A URL without ``//host`` (SQLite's ``sqlite:///file``)
    has no user or password and always passes.

    Raises:
        ValueError: with one line saying what to percent-encode; it holds no piece of
            ``url``.
    """
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if not authority:
        return
    userinfo, at, _host = authority.rpartition("@")
    if "@" in rest[len(authority) :] or (at and not _USERINFO.fullmatch(userinfo)):
        raise ValueError(_CREDENTIALS_HINT)


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """Where a PostgreSQL URL points: a TCP ``host``, or a Unix socket folder.

    Attributes:
        host: the TCP host name or address (``""`` for a socket).
        socket_dir: the folder of the server's socket, an absolute path (``""`` for TCP).
        port: the port (TCP), or the number in the socket file's name; ``None``: the
            driver's default, 5432.
        database: the database's name.
    """

    host: str
    socket_dir: str
    port: int | None
    database: str

    def __str__(self) -> str:
        """``postgresql://host:port/database`` or
        ``postgresql:///database?host=/socket/folder&port=N``: no user, no password."""
        if self.socket_dir:
            port = f"&port={self.port}" if self.port else ""
            return f"postgresql:///{self.database}?host={self.socket_dir}{port}"
        port = f":{self.port}" if self.port else ""
        return f"postgresql://{self.host}{port}/{self.database}"


#: What a socket URL looks like, for the messages below.
SOCKET_FORM = "postgresql+asyncpg://user@/kopek?host=/run/postgresql"


def _one(value: str | tuple[str, ...] | None, name: str) -> str | None:
    if isinstance(value, tuple):
        raise ValueError(f"name one {name} (a URL with several servers is not supported)")
    return value


def server_address(url: str | URL) -> ServerAddress:
    """The server a PostgreSQL URL names (module docstring: a TCP host, or a socket
    folder in ``?host=``), as SQLAlchemy's asyncpg dialect and asyncpg read it.

    Raises:
        ValueError: no database; no host and no socket folder; both; a ``?host=`` that
            is not one absolute path (a TCP host goes before the database); a
            percent-encoded or ``/``-prefixed host before the database (libpq's
            socket spelling, which the asyncpg dialect does not read); a ``port`` that
            is not a number. The message holds no piece of ``url``.
    """
    u = make_url(url)
    in_query = _one(u.query.get("host"), "host")
    query_port = _one(u.query.get("port"), "port")
    if query_port is not None and not query_port.isdigit():
        raise ValueError("port= in the URL's query must be a number")
    port = u.port or (int(query_port) if query_port else None)
    if not u.database:
        raise ValueError(f"a PostgreSQL URL names a database: {_FORMS}")
    if in_query is not None:
        if u.host:
            raise ValueError(f"the URL names its server twice (a host and ?host=): {_FORMS}")
        if not in_query.startswith("/") or "," in in_query:
            raise ValueError(
                "?host= names the folder of the server's Unix socket (an absolute path, "
                f"as in {SOCKET_FORM}); a TCP host goes before the database"
            )
        return ServerAddress("", in_query, port, u.database)
    if not u.host:
        raise ValueError(
            f"a PostgreSQL URL names a host or a socket folder, and a database: {_FORMS}"
        )
    if "%" in u.host or u.host.startswith("/"):
        raise ValueError(f"write a Unix socket folder in the query: {SOCKET_FORM}")
    return ServerAddress(u.host, "", port, u.database)


_FORMS = f"postgresql+asyncpg://user:password@host:5432/kopek or {SOCKET_FORM}"


def passwords(url: str) -> list[str]:
    """The passwords in a database URL — its user's password and a ``password=`` in
    its query (asyncpg reads both) — each as written (percent-encoded) and decoded (as
    the driver sends it and a library might print it): the secrets to redact. None for
    SQLite, nor for a URL :func:`check_credentials` refuses (its pieces are no password,
    and the messages about it never hold the URL)."""
    try:
        check_credentials(url)
        split = urlsplit(url)
        parsed = make_url(url)
    except (ValueError, ArgumentError):
        return []
    found: list[object] = [split.password, parsed.password]
    found += [v for k, v in parse_qsl(split.query, keep_blank_values=False) if k == "password"]
    raw = [
        part.partition("=")[2] for part in split.query.split("&") if part.startswith("password=")
    ]
    found += raw
    decoded = parsed.query.get("password")
    found += list(decoded) if isinstance(decoded, tuple) else [decoded]
    return [str(p) for p in dict.fromkeys(found) if p]


def location(url: str | URL) -> str:
    """The SQLite file's path, or the server and database of a PostgreSQL ``url``
    (:meth:`ServerAddress.__str__`: no user, no password): safe to print."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    u = make_url(url)
    if u.get_backend_name() == "postgresql":
        try:
            return str(server_address(u))
        except ValueError:
            pass  # a URL the settings refuse: the plain form below
    port = f":{u.port}" if u.port else ""
    return f"{u.get_backend_name()}://{u.host or ''}{port}/{u.database or ''}"


def failure_reason(exc: BaseException) -> str:
    """The driver's own sentence for a database failure (``password authentication
    failed for user …``), not SQLAlchemy's wrapper with its statement, parameters and
    help link; ``Type: text`` for anything else. May hold a host name, never the URL."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        inner: BaseException = exc.orig
        args = inner.args
        text = str(args[0]) if args else ""
        return " ".join((text or type(inner).__name__).split())
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def create_engine(url: str | URL, *, pool_size: int = 5) -> AsyncEngine:
    """Create the async engine for ``url``.

    For SQLite the parent folder is created, the pragmas above are set on every
    connection, and the pool is bounded (``pool_size`` + 5 overflow, 30 s timeout)
    so a burst waits for a connection instead of failing.
    """
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    if is_sqlite(url):
        engine = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=5,
            pool_timeout=30,
            connect_args={"timeout": BUSY_TIMEOUT_MS / 1000},
        )
        event.listen(engine.sync_engine, "connect", _on_connect)
        return engine
    return create_async_engine(url, pool_size=pool_size, max_overflow=5, pool_timeout=30)


def make_ddl_transactional(engine: AsyncEngine) -> None:
    """Make every transaction on a SQLite ``engine`` a real ``BEGIN``…``COMMIT``, DDL included.

    The sqlite3 driver only opens a transaction before DML, so ``CREATE TABLE`` commits
    on its own and a migration cut half-way (a signal, a crash) leaves tables without an
    ``alembic_version`` row. This is SQLAlchemy's documented pysqlite/aiosqlite recipe:
    the driver's own transaction handling is switched off and ``BEGIN`` is emitted at
    SQLAlchemy's begin. Used for migrations only; no-op for other backends.
    """
    if not is_sqlite(engine.url):
        return

    def _autocommit_driver(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    event.listen(engine.sync_engine, "connect", _autocommit_driver)
    event.listen(engine.sync_engine, "begin", _begin)
