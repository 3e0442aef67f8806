"""Numeric settings had floors but no ceilings.
``STALE_MESSAGE_SECONDS=99999999999999999999999999`` or the same ``OPERATION_MAX_REQUESTS``
started the bot, then every chat message failed with OverflowError ("Something went wrong");
``PROVIDER_TIMEOUT_SECONDS=1e300`` was a traceback at start, exit 1.

Every numeric setting now has a documented range (``docs/configuration.md``): a huge,
infinite or NaN value is one ``kopek: configuration error in NAME`` line, exit 2. These
tests walk every numeric field of the settings, so a new one without a ceiling fails here.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from pydantic import ValidationError
from pydantic.fields import FieldInfo

import budget.__main__ as budget_cli
from bot.__main__ import main as bot_main
from bot.app.preflight import check_settings
from bot.app.wiring import cascade_config, digest_config, ledger_config
from bot.settings import Settings
from tests.support.clocks import ManualClock
from tests.support.docs import setting_rows


def _numeric(info: FieldInfo) -> bool:
    """``int``, ``float``, ``Decimal`` or one of them ``| None`` (not ``frozenset[int]``)."""
    ann = info.annotation
    union = typing.get_origin(ann) in (typing.Union, types.UnionType)
    return any(a in (int, float, Decimal) for a in (typing.get_args(ann) if union else (ann,)))


def _ceiling(info: FieldInfo) -> float | Decimal | None:
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Le):
            return typing.cast(float | Decimal, meta.le)
        if isinstance(meta, annotated_types.Lt):
            return typing.cast(float | Decimal, meta.lt)
    return None


NUMERIC = sorted(name for name, info in Settings.model_fields.items() if _numeric(info))
HUGE = ["99999999999999999999999999", "1e300", "1e400", "inf", "-inf", "nan", "Infinity"]


def test_the_walk_finds_the_settings_of_the_trial() -> None:
    for name in ("stale_message_seconds", "operation_max_requests", "provider_timeout_seconds"):
        assert name in NUMERIC
    assert len(NUMERIC) > 40


def _range_of(field: str) -> str:
    """The range cell of ``field``'s own row in ``docs/configuration.md``."""
    [row] = setting_rows()[field.upper()]
    return row[-1]


@pytest.mark.parametrize("field", NUMERIC)
def test_every_numeric_setting_has_a_ceiling_and_the_docs_give_it(field: str) -> None:
    """``docs/configuration.md`` has one row for each numeric setting, and that row's
    ceiling is the one the settings enforce."""
    ceiling = _ceiling(Settings.model_fields[field])
    assert ceiling is not None, f"{field.upper()} has no upper bound (Field(le=...))"
    cell = _range_of(field)
    assert re.fullmatch(rf"(≥|>) [0-9.]+, ≤ {int(ceiling)}", cell), (field, cell)
    assert ceiling == int(ceiling)


def _below(floor: str, field: str, strict: bool) -> str:
    """A value just below the documented floor (the floor itself when it is excluded)."""
    if strict:
        return floor
    integral = typing.get_args(Settings.model_fields[field].annotation) or (
        Settings.model_fields[field].annotation,
    )
    if int in integral:
        return str(int(floor) - 1)
    return str(Decimal(floor) - Decimal("0.001"))


@pytest.mark.parametrize("field", NUMERIC)
def test_a_value_below_the_documented_floor_is_refused(field: str) -> None:
    """The floor the docs give is one the settings enforce: just below it (or at it,
    when the docs exclude it) the settings refuse the value."""
    match = re.fullmatch(r"(≥|>) ([0-9.]+), ≤ [0-9]+", _range_of(field))
    assert match, (field, _range_of(field))
    value = _below(match.group(2), field, strict=match.group(1) == ">")
    below: dict[str, Any] = {field: value}
    with pytest.raises(ValidationError):
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", **below)


@pytest.mark.parametrize("field", NUMERIC)
def test_a_huge_or_non_finite_value_is_one_line_and_exit_2(
    field: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each of :data:`HUGE` in turn (one test a setting, not a test a pair: the 707
    pairs spent more CPU on pytest's per-test set-up than on the start they check)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kopek"])
    monkeypatch.setenv("BOT_TOKEN", "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghi")
    monkeypatch.setenv("GROQ_API_KEY", "gsk_abcdefghijkl")
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'k.db'}")
    for value in HUGE:
        monkeypatch.setenv(field.upper(), value)
        assert bot_main() == 2, value
        out, err = capsys.readouterr()
        [line] = err.strip().splitlines()
        assert line.startswith(f"kopek: configuration error in {field.upper()}: "), (value, line)
        assert out == "", value
        assert not (tmp_path / "k.db").exists(), value


def _at_ceilings() -> Settings:
    values: dict[str, object] = {}
    for name in NUMERIC:
        ceiling = _ceiling(Settings.model_fields[name])
        assert ceiling is not None
        values[name] = ceiling
    # cross-checked against other settings, not against its own ceiling
    values["metrics_port"] = 9100
    values["webhook_listen_port"] = 8080
    values["chat_max_output_tokens"] = 1024
    values["media_download_max_bytes"] = 20 * 1024 * 1024  # more needs a local Bot API
    return Settings(_env_file=None, bot_token="1:x", deepseek_api_key="k", **values)  # type: ignore[arg-type]


def test_every_ceiling_at_once_starts_and_converts_without_overflow() -> None:
    """The ceilings are far below what breaks a timedelta, a SQLite INTEGER or a C int:
    the start-up checks pass and the bot's configs (ledger, cascade, digests) build."""
    settings = _at_ceilings()
    assert check_settings(settings, ManualClock()) is None
    ledger_config(settings)
    cascade_config(settings)
    digest_config(settings)
    for name in NUMERIC:
        if name.endswith("_seconds"):
            timedelta(seconds=float(getattr(settings, name)))
        if name.endswith("_minutes"):
            timedelta(minutes=int(getattr(settings, name)))
        value = getattr(settings, name)
        assert value is None or int(value) < 2**31, name


@pytest.mark.parametrize("value", ["1e400", "99999999999999999999999999", "nan", "inf"])
def test_the_books_cli_refuses_a_huge_tolerance(
    value: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m budget reconcile`` reads RECONCILE_TOLERANCE_USD with the bot's ceiling."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECONCILE_TOLERANCE_USD", value)
    assert budget_cli.main(["export"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bad setting reconcile_tolerance_usd"), line


def test_values_within_the_ceilings_are_accepted() -> None:
    settings = Settings(
        _env_file=None,
        bot_token="1:x",
        groq_api_key="k",
        stale_message_seconds="86400",
        operation_max_requests="1000",
        provider_timeout_seconds="3600",
        hold_ttl_seconds="86400",
        digest_max_free_share="1",
        auto_kill_fraction="0",
    )
    assert settings.stale_message_seconds == 86_400
    with pytest.raises(ValidationError):
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", digest_max_free_share="1.5")
