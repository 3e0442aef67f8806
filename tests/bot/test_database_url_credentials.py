"""A PostgreSQL password with a raw ``@`` and later a ``/``
(``kopek:hun@ter/22secret@127.0.0.1:9/kopek``) passed the settings: SQLAlchemy read the
host ``ter`` and the database ``22secret@127.0.0.1:9/kopek``, so ``kopek`` printed
``cannot reach the database postgresql://ter/22secret@…`` (exit 1) and
``python -m budget export`` the same, after a DNS look-up for a piece of the password.

Now any URL whose user and password could be read more than one way is refused by
``kopek``, ``python -m bot`` and ``python -m budget`` alike: one line, exit 2, no piece of
the password; percent-encoded forms still work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import budget.__main__ as budget_cli
from bot.__main__ import main as bot_main
from bot.settings import Settings, check_database_url, database_url_passwords
from budget.kernel.db import check_credentials

#: The password's pieces: none may reach any output.
_PIECES = ("Qw1x", "Er2y", "Ty3z")

_REFUSED = [
    # the shape first reported: @ then /
    "postgresql+asyncpg://kopek:Qw1x@Er2y/Ty3z@127.0.0.1:9/kopek",
    # / then @
    "postgresql+asyncpg://kopek:Qw1x/Er2y@Ty3z@127.0.0.1:9/kopek",
    # one raw character each
    "postgresql+asyncpg://kopek:Qw1x@Er2y@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x/Er2y@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x#Er2y@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x?Er2y@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x:Er2y@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x[Er2y@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x%Er2y@127.0.0.1:9/kopek",
    # # and ? before a later @, and a : that looks like a port
    "postgresql+asyncpg://kopek:Qw1x#Er2y/Ty3z@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x?Er2y:Ty3z@127.0.0.1:9/kopek",
    "postgresql+asyncpg://kopek:Qw1x@Er2y:99@127.0.0.1:9/kopek",
    # an @ after the host: in the database name or the query
    "postgresql+asyncpg://kopek:Qw1xEr2yTy3z@127.0.0.1:9/kopek@x",
    "postgresql+asyncpg://kopek:Qw1xEr2yTy3z@127.0.0.1:9/kopek?ssl=Er2y@x",
    # the user's part too
    "postgresql+asyncpg://ko@pek:Qw1xEr2yTy3z@127.0.0.1:9/kopek",
]

_ACCEPTED = [
    ("postgresql+asyncpg://kopek:Qw1x%40Er2y%2FTy3z@127.0.0.1:9/kopek", "Qw1x@Er2y/Ty3z"),
    ("postgresql+asyncpg://kopek:Qw1x%2FEr2y%40Ty3z@127.0.0.1:9/kopek", "Qw1x/Er2y@Ty3z"),
    (
        "postgresql+asyncpg://kopek:Qw1x%23%3F%3A%25%5B%5DEr2y@[::1]:9/kopek?ssl=require",
        "Qw1x#?:%[]Er2y",
    ),
    ("postgresql+asyncpg://ko%40pek:Qw1x%3aEr2y@db.internal/kopek", "Qw1x:Er2y"),
    ("postgresql+asyncpg://kopek@127.0.0.1:9/kopek", None),
    ("postgresql+asyncpg://127.0.0.1:9/kopek", None),
]


def _no_piece(text: str) -> None:
    for piece in _PIECES:
        assert piece not in text, text


@pytest.mark.parametrize("url", _REFUSED)
def test_an_ambiguous_user_or_password_is_refused_by_the_settings(url: str) -> None:
    with pytest.raises(ValueError, match="percent-encode @ : /") as info:
        check_database_url(url)
    _no_piece(str(info.value))
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", database_url=url)
    [error] = caught.value.errors()
    assert error["loc"] == ("database_url",)
    _no_piece(str(error["msg"]))
    # its pieces are no password: nothing is "redacted" out of unrelated words
    assert database_url_passwords(url) == []


@pytest.mark.parametrize("url", _REFUSED)
def test_kopek_prints_one_line_and_exits_2(
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kopek"])
    monkeypatch.setenv("BOT_TOKEN", "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghi")
    monkeypatch.setenv("GROQ_API_KEY", "gsk_abcdefghijkl")
    monkeypatch.setenv("DATABASE_URL", url)
    assert bot_main() == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert line.startswith("kopek: configuration error in DATABASE_URL: cannot read the user")
    _no_piece(out + err)


@pytest.mark.parametrize("url", _REFUSED)
def test_python_m_budget_export_prints_one_line_and_exits_2(
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", url)
    assert budget_cli.main(["export"]) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert line.startswith("DATABASE_URL: cannot read the user and password one way only")
    _no_piece(out + err)


@pytest.mark.parametrize(("url", "password"), _ACCEPTED)
async def test_percent_encoded_users_and_passwords_still_work(
    url: str, password: str | None
) -> None:
    check_credentials(url)
    await budget_cli._check_url(url)  # no _Fail
    settings = Settings(_env_file=None, bot_token="1:x", groq_api_key="k", database_url=url)
    if password is not None:
        assert password in settings.secret_values()


@pytest.mark.parametrize(
    "url",
    ["sqlite+aiosqlite:///data/k@pek.db", "sqlite+aiosqlite:////srv/a:b/kopek.db"],
)
def test_sqlite_paths_have_no_user_or_password_to_check(url: str) -> None:
    check_credentials(url)
    assert check_database_url(url) == url
