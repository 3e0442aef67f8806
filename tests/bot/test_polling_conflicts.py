"""A second process polling the same token: aiogram logged Telegram's
409 Conflict at ERROR, plus a "Sleep for" WARNING, every few seconds, forever."""

from __future__ import annotations

import logging

import pytest

from bot.ops.logs import PollingConflicts, setup_logging


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.getMessage()))


def _poll_failures(log: logging.Logger, error: str, times: int) -> None:
    """What aiogram's polling loop logs for each failed getUpdates (dispatcher.py)."""
    for n in range(times):
        log.error("Failed to fetch updates - %s: %s", error, "Telegram server says - Conflict")
        log.warning("Sleep for %f seconds and try again... (tryings = %d, bot id = %d)", 1.0, n, 1)


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_a_conflict_is_one_warning_that_says_what_it_means(level: int) -> None:
    """Five conflicts are one WARNING naming another poller of the token (no ERROR, no
    "Sleep for" lines); at DEBUG the rest are still there, at DEBUG. Another failure
    (the network) keeps aiogram's ERROR and WARNING."""
    log = logging.getLogger(f"test.polling.{level}")
    log.setLevel(level)
    log.propagate = False
    lines = _Lines()
    log.addHandler(lines)
    log.addFilter(PollingConflicts())
    _poll_failures(log, "TelegramConflictError", 5)
    _poll_failures(log, "TelegramNetworkError", 1)
    shown = [(lvl, msg) for lvl, msg in lines.lines if lvl != "DEBUG"]
    assert [lvl for lvl, _ in shown] == ["WARNING", "ERROR", "WARNING"]
    assert shown[0][1].startswith("another process is polling this bot token (Telegram 409")
    assert "TelegramNetworkError" in shown[1][1] and shown[2][1].startswith("Sleep for")
    debug = [msg for lvl, msg in lines.lines if lvl == "DEBUG"]
    assert len(debug) == (9 if level == logging.DEBUG else 0)  # 4 conflicts + 5 sleeps


def test_the_bot_s_logging_puts_the_filter_on_aiogram_s_dispatcher() -> None:
    """``setup_logging`` (called once per start, and again by tests) leaves exactly one."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        setup_logging("INFO", [])
        setup_logging("INFO", [])
        dispatcher = logging.getLogger("aiogram.dispatcher")
        assert sum(isinstance(f, PollingConflicts) for f in dispatcher.filters) == 1
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
