"""The checks and parsers of single settings: each takes the value as read and returns
it (cleaned) or raises :class:`ValueError` with the one sentence the operator reads
after ``configuration error in NAME:`` (:func:`bot.cli.config_error`).

No message holds the value when it may be a secret (a token, a webhook secret, a
database URL with its password). The settings classes (:mod:`bot.settings.env`) call
these from their validators; :func:`check_database_url` is also the Alembic command
line's check.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import SplitResult, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import SecretStr
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from bot.chat.payer import SERVICE_USER_IDS
from budget.kernel.db import check_credentials, passwords, server_address
from scheduler.profiles import parse_digest_time

__all__ = [
    "HEALTH_PATHS",
    "MAX_USER_ID",
    "TOKEN_PATTERN",
    "check_admin_ids",
    "check_dashboard_url",
    "check_database_url",
    "check_digest_time",
    "check_http_url",
    "check_tz",
    "check_webhook_path",
    "check_webhook_secret",
    "check_webhook_url",
    "comma_ids",
    "database_url_passwords",
    "parse_admin_ids",
    "url_password",
]

#: A bot token as aiogram's ``validate_token`` accepts it: digits, a colon, then a secret
#: without whitespace. Checked by pattern so reading settings never imports aiogram (~6 s).
TOKEN_PATTERN = re.compile(r"[0-9]+:\S+")

#: ``WEBHOOK_SECRET``: Telegram's ``secret_token`` alphabet (``A-Z a-z 0-9 _ -``, at most
#: 256), at least 16 characters: a short one could be guessed, and secrets under 6
#: characters cannot be redacted from logs.
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{16,256}")
#: ``ADMIN_IDS`` entries: ASCII digits with an optional sign (``int()`` alone also reads
#: ``٤٢`` as 42, and ``4_2``).
_ADMIN_ID = re.compile(r"[+-]?[0-9]+")
#: The largest Telegram user id: "at most 52 significant bits" (Bot API, ``User.id``).
MAX_USER_ID = 2**52 - 1

#: The ports Telegram delivers webhooks to (core.telegram.org/bots/api#setwebhook).
_WEBHOOK_PORTS = (443, 80, 88, 8443)
#: A webhook path: a leading slash, then URL-safe characters.
_WEBHOOK_PATH = re.compile(r"/[A-Za-z0-9/_.-]*")
#: Paths of the health endpoints, served beside the webhook (and by the metrics server).
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})


@functools.cache
def _zone_names() -> frozenset[str]:
    # available_timezones() walks tzdata's folders on every call (~4 ms); the set is
    # fixed for the life of the process
    return frozenset(available_timezones())


def check_tz(name: str) -> str:
    """``name`` when it is an IANA zone tzdata has (``Europe/Berlin``, ``UTC``)."""
    if name not in _zone_names():  # a folder ("Europe") or a long name: OSError
        raise ValueError(f"unknown IANA timezone {name[:64]!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown IANA timezone {name[:64]!r}") from exc
    return name


def check_http_url(value: str) -> str:
    """``value`` without a trailing slash when it is an http(s) URL with a host, a
    readable port and no spaces; else ValueError (the URL is not echoed)."""
    if not value.startswith(("http://", "https://")) or len(value) < 10:
        raise ValueError("must be an http(s) URL")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of 0-65535
    except ValueError:
        raise ValueError("must be an http(s) URL (unreadable host or port)") from None
    host = parts.hostname or ""
    if not host or any(ch.isspace() for ch in value):
        raise ValueError("must be an http(s) URL with a host and no spaces")
    return value.rstrip("/")


def url_password(url: str) -> str | None:
    """The password of a ``user:password@`` in ``url``, if any (a proxy's credentials)."""
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None


def comma_ids(text: str, pattern: re.Pattern[str], error: str, *, longest: int) -> frozenset[int]:
    """The ids of a comma-separated list as written (``"42, 7"``; empty items skipped).

    Raises:
        ValueError: ``error``, when an item is not ``pattern`` or longer than ``longest``.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(pattern.fullmatch(p) and len(p) <= longest for p in parts):
        raise ValueError(error)
    return frozenset(int(p) for p in parts)


def parse_admin_ids(value: object) -> object:
    """``ADMIN_IDS`` as written (``"42, 7"``, or one number) → a frozenset of ints; any
    other value is passed on for pydantic to check."""
    if isinstance(value, str):
        error = "ADMIN_IDS must be comma-separated Telegram user ids (digits 0-9)"
        return comma_ids(value, _ADMIN_ID, error, longest=32)
    if isinstance(value, int):
        return frozenset({value})
    return value


def check_admin_ids(value: frozenset[int]) -> frozenset[int]:
    """``value`` when every id can be one person's: not 0, not beyond 52 bits, not a
    group or channel (negative), not one of Telegram's shared service accounts."""
    if 0 in value:
        raise ValueError(
            "ADMIN_IDS contains 0, which is no Telegram user id; list personal user ids only"
        )
    for uid in sorted(u for u in value if abs(u) > MAX_USER_ID):
        raise ValueError(
            f"ADMIN_IDS contains {str(uid)[:24]}: larger than any Telegram user id "
            "(at most 52 bits); list personal user ids only"
        )
    for uid in sorted(u for u in value if u < 0):
        raise ValueError(
            f"ADMIN_IDS contains {uid}: a group or channel id, not a person's user id "
            "(admin notices would be posted in that chat); list personal user ids only"
        )
    for uid in sorted(value & SERVICE_USER_IDS.keys()):
        raise ValueError(
            f"ADMIN_IDS contains {uid} ({SERVICE_USER_IDS[uid]}): it is not one person, "
            "so anyone could use admin commands through it; list personal user ids only"
        )
    return value


def _public_https(value: str, not_https: str, has_query: str) -> SplitResult:
    """``value`` split, when it is an https URL with a host, no spaces, no credentials,
    no query and no fragment.

    Raises:
        ValueError: ``not_https`` (no https scheme or host, or a space), ``has_query``
            (a ``?query`` or ``#fragment``), or the shared reasons.
    """
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of 0-65535
    except ValueError:
        raise ValueError("must be an https URL (unreadable host or port)") from None
    if parts.scheme != "https" or not parts.hostname or any(c.isspace() for c in value):
        raise ValueError(not_https)
    if parts.password or parts.username:
        raise ValueError("must not carry a user or password")
    if "#" in value or "?" in value:  # a client never sends a fragment: a typo
        raise ValueError(has_query)
    return parts


def check_webhook_url(value: object) -> object:
    """``WEBHOOK_URL``: ``None`` when unset or empty (polling); else the public https
    URL Telegram can call (no credentials, query or fragment; one of its ports)."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        return value
    parts = _public_https(
        value,
        "must be the public https:// URL Telegram posts updates to "
        "(Telegram calls webhooks over HTTPS only)",
        "must not carry a ?query or #fragment (Telegram calls the URL as it is)",
    )
    if parts.port not in (None, *_WEBHOOK_PORTS):
        raise ValueError(
            f"port {parts.port}: Telegram calls webhooks on ports 443, 80, 88 or 8443 only"
        )
    return value


def check_webhook_secret(value: object) -> object:
    """``WEBHOOK_SECRET``: ``None`` when empty; else it must be in Telegram's
    ``secret_token`` alphabet, 16-256 long (the value itself is never echoed)."""
    if value == "":
        return None
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    if isinstance(raw, str) and not _WEBHOOK_SECRET.fullmatch(raw):
        raise ValueError(
            "must be 16-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's secret_token "
            "alphabet; e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return value


def check_webhook_path(value: str) -> str:
    """``WEBHOOK_PATH``: a URL path that is not a health endpoint's."""
    if not _WEBHOOK_PATH.fullmatch(value):
        raise ValueError("must be a URL path such as /telegram (letters, digits, / _ . -)")
    if value.rstrip("/") in HEALTH_PATHS:
        raise ValueError(f"{value} is the health endpoint's path; choose another")
    return value


def check_dashboard_url(value: object) -> object:
    """``DASHBOARD_URL``: ``None`` when unset or empty (no dashboard); else the public
    https URL Telegram opens the Mini App at (no credentials, query or fragment; a path
    of URL-safe characters, returned ending in ``/`` so the page's relative links stay
    under it). Telegram opens ``web_app`` buttons over HTTPS only."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        return value
    parts = _public_https(
        value,
        "must be the public https:// URL of the dashboard (Telegram opens Mini Apps "
        "over HTTPS only)",
        "must not carry a ?query or #fragment (Telegram adds its own)",
    )
    path = parts.path or "/"
    if path == "/":
        raise ValueError("needs a path of its own, e.g. https://bot.example.org/dashboard/")
    if not _WEBHOOK_PATH.fullmatch(path) or ".." in path:
        raise ValueError("its path may hold letters, digits, / _ . - only, e.g. /dashboard/")
    if path.rstrip("/") in HEALTH_PATHS or path.rstrip("/") == "/metrics":
        raise ValueError(f"{path} is a health or metrics path; choose another, e.g. /dashboard/")
    return value if value.endswith("/") else value + "/"


def check_digest_time(value: str) -> str:
    """``DIGEST_DEFAULT_TIME``: a 24-hour ``HH:MM``, stripped. Checked here because the
    profile store sees it only once the bot is built, after the migrations."""
    try:
        parse_digest_time(value)
    except ValueError:
        raise ValueError("must be a 24-hour time HH:MM, e.g. 09:00") from None
    return value.strip()


def _same_host(value: str, host: str, port: int | None) -> bool:
    """Whether a plain URL split of ``value`` finds SQLAlchemy's ``host`` and ``port``."""
    try:
        split = urlsplit(value)
        return (split.hostname or "") == host.lower().strip("[]") and split.port == port
    except ValueError:
        return False


def check_database_url(value: str) -> str:
    """``value`` when it is a SQLite file URL or a ``postgresql+asyncpg://`` URL with a
    host or a Unix socket folder (``?host=/run/postgresql``), and a database
    (:func:`budget.kernel.db.server_address`).

    Raises:
        ValueError: anything else (the message never holds the URL: it may hold a
            password).
    """
    check_credentials(value)  # first: no parser may cut a password into a host
    try:
        url = make_url(value)
    except ArgumentError:
        raise ValueError(
            "not a database URL (e.g. sqlite+aiosqlite:///data/kopek.db or "
            "postgresql+asyncpg://user:password@host:5432/kopek)"
        ) from None
    except ValueError:  # e.g. a raw ':' in the password read as a port
        raise ValueError(
            "cannot read the URL: percent-encode @ : / % and spaces in the user and "
            "password (@ is %40, : is %3A, / is %2F, % is %25)"
        ) from None
    backend = url.get_backend_name()
    if backend == "postgres":
        raise ValueError(
            "PostgreSQL is used through the asyncpg driver only: write "
            "postgresql+asyncpg://… (not postgres://…)"
        )
    if backend == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError("must name a SQLite file, e.g. sqlite+aiosqlite:///data/kopek.db")
        return value
    if backend == "postgresql":
        if url.get_driver_name() != "asyncpg":
            raise ValueError(
                f"PostgreSQL is used through the asyncpg driver only: write "
                f"postgresql+asyncpg://… (not {url.drivername}://…)"
            )
        server_address(url)  # a host or a socket folder, and a database
        if not _same_host(value, url.host or "", url.port):
            # e.g. a password with a raw @ or /: the parsers (SQLAlchemy's, asyncpg's)
            # would cut it differently and print a piece of it as a host
            raise ValueError(
                "cannot read the host: the user or password seems to hold a raw @ / # or ?; "
                "percent-encode them (@ is %40, / is %2F, # is %23, ? is %3F, : is %3A, "
                "% is %25)"
            )
        return value
    raise ValueError(
        f"{backend[:32]!r} is not supported: use sqlite+aiosqlite:///path/kopek.db or "
        "postgresql+asyncpg://user:password@host:5432/kopek"
    )


def database_url_passwords(database_url: str) -> list[str]:
    """The passwords of a database URL as written (percent-encoded) and decoded: its
    user's and a ``password=`` in its query (:func:`budget.kernel.db.passwords`)."""
    return passwords(database_url)
