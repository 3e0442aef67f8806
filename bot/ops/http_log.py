"""The log of the bot's HTTP servers (the webhook and dashboard port, the metrics port).

aiohttp logs every request it cannot parse — a header over its 8,190-byte line limit,
a malformed request line, a bad chunk — with ``logger.exception``: an ERROR and a
traceback of its parser, for what is only a stranger's bad request (the client gets
aiohttp's 400 and the connection is closed). :func:`server_log` is the logger those
servers are given instead of ``aiohttp.server`` (``AppRunner(logger=...)``): its filter
turns such a record into one WARNING line naming the client's address and the parser's
error class, without the traceback and without the error's text (it may quote the
request line or a header, which can hold the webhook path or a token). Every other
record (a handler's unexpected exception) passes unchanged.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["BadRequestFilter", "server_log"]


class BadRequestFilter(logging.Filter):
    """Rewrites a record of an unparsable request into one WARNING line (module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = "bad HTTP request from %s refused with %s: %s"
        record.args = (remote, exc.code, type(exc).__name__)
        record.exc_info, record.exc_text = None, None
        return True


def server_log() -> logging.Logger:
    """The servers' logger, ``bot.ops.http``, with its :class:`BadRequestFilter` (added
    once): ``AppRunner(..., logger=server_log())``."""
    logger = logging.getLogger("bot.ops.http")
    if not any(isinstance(f, BadRequestFilter) for f in logger.filters):
        logger.addFilter(BadRequestFilter())
    return logger
