"""Logging set-up with secret redaction.

Every record passes :class:`RedactSecrets` at the handler, so no token or API key
reaches a log line even if a library formats one into a message or an exception
(aiogram puts the bot token in request URLs).
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Iterable
from types import TracebackType

__all__ = [
    "PollingConflicts",
    "RedactSecrets",
    "install_excepthooks",
    "redact",
    "setup_logging",
]

#: Shorter values are not treated as secrets (replacing them would garble every line).
MIN_SECRET_LEN = 6


def _secret_parts(secrets: Iterable[str]) -> list[str]:
    parts: set[str] = set()
    for s in secrets:
        if len(s) >= MIN_SECRET_LEN:
            parts.add(s)
            if ":" in s:  # Telegram token "<bot id>:<secret>": the secret half alone too
                tail = s.split(":", 1)[1]
                if len(tail) >= MIN_SECRET_LEN:
                    parts.add(tail)
    return sorted(parts, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (and a token's secret half) replaced by ``***``."""
    for secret in _secret_parts(secrets):
        text = text.replace(secret, "***")
    return text


class RedactSecrets(logging.Filter):
    """Replaces each secret (and the token's numeric-id-less tail) with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = _secret_parts(secrets)

    def _clean(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info:
            formatter = logging.Formatter()
            message = message + "\n" + formatter.formatException(record.exc_info)
            record.exc_info = None
            record.exc_text = None
        if record.stack_info:
            message = message + "\n" + record.stack_info
            record.stack_info = None
        record.msg = self._clean(message)
        record.args = None
        return True


class PollingConflicts(logging.Filter):
    """On aiogram's dispatcher logger: Telegram's ``409 Conflict`` (another process polls
    the same token; Telegram allows one ``getUpdates`` consumer per token) is one
    WARNING that says so, not an ERROR and a "Sleep for" line every few seconds forever.
    Later conflicts go to DEBUG (dropped unless DEBUG is on); other failures pass
    unchanged. aiogram keeps retrying either way: the process takes over when it is
    the only poller left."""

    def __init__(self) -> None:
        super().__init__()
        self._warned = False
        self._quiet_sleep = False

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg == "Failed to fetch updates - %s: %s" and args[:1] == (
            "TelegramConflictError",
        ):
            self._quiet_sleep = True
            if not self._warned:
                self._warned = True
                record.levelno, record.levelname = logging.WARNING, "WARNING"
                record.msg = (
                    "another process is polling this bot token (Telegram 409 Conflict: one "
                    "getUpdates consumer per token); this process keeps retrying and takes "
                    "over when it is the only one — run one polling process per token "
                    "(further conflicts are logged at DEBUG)"
                )
                record.args = None
                return True
            return self._debug(record)
        if self._quiet_sleep and str(record.msg).startswith("Sleep for "):
            self._quiet_sleep = False
            return self._debug(record)
        self._quiet_sleep = False
        return True

    @staticmethod
    def _debug(record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def setup_logging(level: str, secrets: Iterable[str]) -> None:
    """Root logging to stderr at ``level`` with secrets redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiogram.event").setLevel(logging.WARNING)
    dispatcher = logging.getLogger("aiogram.dispatcher")
    for old in [f for f in dispatcher.filters if isinstance(f, PollingConflicts)]:
        dispatcher.removeFilter(old)
    dispatcher.addFilter(PollingConflicts())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # a line every minute


def install_excepthooks(secrets: Iterable[str]) -> None:
    """Last resort: an exception nothing caught (in the main thread or any other) is
    printed with every secret redacted, never by Python's default hook (which would print
    a request URL holding the bot token)."""
    parts = _secret_parts(secrets)

    def clean(text: str) -> str:
        for secret in parts:
            text = text.replace(secret, "***")
        return text

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        print(clean(f"kopek: unexpected error\n{text}"), file=sys.stderr, end="")

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            hook(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = hook
    threading.excepthook = thread_hook
