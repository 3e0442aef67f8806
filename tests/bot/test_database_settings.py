"""DATABASE_URL: a SQLite file or PostgreSQL through asyncpg; anything else is
one configuration error that never echoes the URL; the PostgreSQL password is a secret."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.app.database import location, start_failure
from bot.cli import config_error
from bot.ops.logs import redact
from bot.settings import Settings
from budget.kernel.schema import SchemaMismatch


def _settings(url: str) -> Settings:
    return Settings(_env_file=None, bot_token="1:x", groq_api_key="k", database_url=url)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///data/kopek.db",
        "postgresql+asyncpg://kopek:secret-pw@db.internal:5432/kopek",
        "postgresql+asyncpg://kopek@127.0.0.1/kopek?ssl=require",
        "postgresql+asyncpg://kopek:p%40s%2F%23%3Fsecret-pw@DB.Example.org:5432/kopek",
        "postgresql+asyncpg://kopek:secret-pw@[::1]:5432/kopek",
        # a Unix socket folder (a server on the same machine, a socket proxy)
        "postgresql+asyncpg://kopek@/kopek?host=/run/postgresql",
        "postgresql+asyncpg://kopek:secret-pw@/kopek?host=/run/postgresql&port=5433",
        "postgresql+asyncpg://kopek@/kopek?host=%2Fcloudsql%2Fproject%3Aregion%3Adb",
    ],
)
def test_sqlite_files_and_asyncpg_urls_are_accepted(url: str) -> None:
    assert _settings(url).database_url == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://kopek:secret-pw@db/kopek", "asyncpg driver only"),
        ("postgresql+psycopg://kopek:secret-pw@db/kopek", "asyncpg driver only"),
        ("postgresql+asyncpg://kopek:secret-pw@db", "names a database"),
        ("postgresql+asyncpg://kopek:secret-pw@/kopek", "names a host or a socket folder"),
        ("postgresql+asyncpg://kopek:secret-pw@db/kopek?host=/run/pg", "its server twice"),
        ("postgresql+asyncpg://kopek:secret-pw@/kopek?host=db", "an absolute path"),
        ("postgresql+asyncpg://kopek:secret-pw@/kopek?host=/a&host=/b", "name one host"),
        ("postgresql+asyncpg://kopek:secret-pw@/kopek?host=/a&port=x", "must be a number"),
        ("postgresql+asyncpg://kopek:secret-pw@%2Frun%2Fpg/kopek", "in the query"),
        ("mysql+aiomysql://kopek:secret-pw@db/kopek", "'mysql' is not supported"),
        ("sqlite+aiosqlite://", "must name a SQLite file"),
        ("notaurl", "not a database URL"),
        # these were Python's int() error, and no asyncpg hint for postgres://
        ("postgresql+asyncpg://kopek:p@ss:w/rd%secret-pw@db:5432/kopek", "percent-encode @ :"),
        ("postgres://kopek:secret-pw@db/kopek", "write postgresql+asyncpg://… (not postgres"),
        # a raw @ / # ? in the password printed a piece of it as the host
        # (exit 1 "cannot reach"), or failed later with a bare ValueError
        ("postgresql+asyncpg://kopek:Pa55@secret-pw@127.0.0.1:5441/kopek", "percent-encode @ : /"),
        ("postgresql+asyncpg://kopek:Pa55/secret-pw@127.0.0.1:5441/kopek", "percent-encode @ : /"),
        ("postgresql+asyncpg://kopek:Pa55#secret-pw@127.0.0.1:5441/kopek", "percent-encode @ : /"),
        ("postgresql+asyncpg://kopek:Pa55?secret-pw@127.0.0.1:5441/kopek", "percent-encode @ : /"),
    ],
)
def test_other_drivers_and_backends_are_one_error_without_the_url(url: str, says: str) -> None:
    """The line ``python -m bot`` prints names what to write instead, without the
    password."""
    with pytest.raises(ValidationError) as info:
        _settings(url)
    [error] = info.value.errors()
    assert error["loc"] == ("database_url",)
    assert says in str(error["msg"])
    line = config_error(info.value)
    assert line.startswith("kopek: configuration error in DATABASE_URL: ")
    assert "secret-pw" not in line


def test_the_database_password_is_redacted_as_written_and_decoded() -> None:
    """A password with ``@`` and ``/`` is percent-encoded in the URL: both spellings
    are secrets, so neither reaches a log line."""
    settings = _settings("postgresql+asyncpg://kopek:p%40ss%2Fword-77@db:5432/kopek")
    secrets = settings.secret_values()
    assert "p@ss/word-77" in secrets and "p%40ss%2Fword-77" in secrets
    line = "connect postgresql+asyncpg://kopek:p%40ss%2Fword-77@db failed for p@ss/word-77"
    assert "word-77" not in redact(line, secrets)
    assert _settings("sqlite+aiosqlite:///data/kopek.db").secret_values() == ["1:x", "k"]


def test_a_socket_url_is_named_by_its_folder_and_its_passwords_are_redacted() -> None:
    """A socket URL prints as ``postgresql:///db?host=/folder`` (no user, no password);
    its password — in the user part or as ``password=`` in the query, as asyncpg
    reads both — is a secret, as written and decoded."""
    url = "postgresql+asyncpg://kopek:pw%2Fone-77@/kopek?host=/run/postgresql&port=5433"
    assert location(url) == "postgresql:///kopek?host=/run/postgresql&port=5433"
    assert {"pw%2Fone-77", "pw/one-77"} <= set(_settings(url).secret_values())
    query = "postgresql+asyncpg://kopek@/kopek?host=/run/postgresql&password=pw%40two-88"
    assert {"pw%40two-88", "pw@two-88"} <= set(_settings(query).secret_values())
    code, line = start_failure(OSError("No such file or directory"), url)
    assert code == 1 and "postgresql:///kopek?host=/run/postgresql&port=5433" in line
    assert "one-77" not in line and "kopek:" not in line


def test_start_failures_name_the_database_without_credentials() -> None:
    """Unreachable server: exit 1; refused schema: exit 2; the location has no user or
    password; SQLite failures stay exit 2 with the file's path."""
    url = "postgresql+asyncpg://kopek:secret-pw@db.internal:6543/kopek"
    assert location(url) == "postgresql://db.internal:6543/kopek"
    code, line = start_failure(ConnectionRefusedError(111, "Connect call failed"), url)
    assert code == 1 and line.startswith("cannot reach the database postgresql://db.internal")
    code, line = start_failure(SchemaMismatch(("0099_x",), "0013_turn_tokens", ahead=True), url)
    assert code == 2 and "0099_x" in line
    code, line = start_failure(
        PermissionError(13, "Permission denied"), "sqlite+aiosqlite:///d/k.db"
    )
    assert (code, line) == (
        2,
        "cannot prepare the database d/k.db: PermissionError: [Errno 13] Permission denied",
    )
    assert all("secret-pw" not in text for text in (location(url), line))


@pytest.mark.parametrize(("beat", "dead"), [(10.0, 29.0), (1.0, 2.0), (0.5, 1.0)])
def test_dead_after_shorter_than_three_heartbeats_is_refused(beat: float, dead: float) -> None:
    """A replica on a loaded machine with a 0.5 s heartbeat and 2 s dead-after was taken for
    dead by another, whose "please resend" reached a user mid-answer; three beats is the floor."""
    with pytest.raises(ValidationError) as caught:
        Settings(
            _env_file=None,
            bot_token="1:x",
            groq_api_key="k",
            process_heartbeat_seconds=beat,
            process_dead_after_seconds=dead,
        )
    assert "at least 3 × PROCESS_HEARTBEAT_SECONDS" in str(caught.value)


def test_dead_after_of_three_heartbeats_is_accepted() -> None:
    settings = Settings(
        _env_file=None,
        bot_token="1:x",
        groq_api_key="k",
        process_heartbeat_seconds=2.0,
        process_dead_after_seconds=6.0,
    )
    assert settings.process_dead_after_seconds == 6.0
