"""Telegram files users send: ``getFile``, then the download, within a size cap and a
deadline — :class:`TelegramFiles`.

The cloud Bot API serves files "of up to 20MB in size" (core.telegram.org/bots/api#getfile;
:data:`BOT_API_DOWNLOAD_LIMIT`, 20 MiB, the same figure ``/reconcile`` uses), so a larger
file is refused *before any request*, from the message's own ``file_size``; then from
``getFile``'s; then Telegram's own "file is too big" is read as the same refusal. While
streaming, the bytes are counted and the download stops one chunk past the cap, so a
message that understates its size costs at most the cap and a chunk. The whole
exchange — ``getFile`` and the body — has one deadline.

The download URL holds the bot token (``/file/bot<token>/<path>``): it is never logged
or put in an exception; aiohttp's errors (whose text includes the URL) are translated
into :mod:`bot.media.errors` here, without the URL, their cause suppressed.

With a local Bot API server (``TelegramAPIServer.is_local``) ``getFile`` gives a path on
this machine: the same caps apply, the file is read in a worker thread.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp
from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramBadRequest, TelegramNetworkError

from bot.media.errors import DownloadFailed, TooBigToDownload

__all__ = ["BOT_API_DOWNLOAD_LIMIT", "TelegramFiles"]

#: The cloud Bot API's download limit, bytes (20 MB, read as MiB).
BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024

_CHUNK = 65_536


class TelegramFiles:
    """Downloads the files users send.

    Args:
        bot: the bot (its session: the Bot API server, the token, the session
            middlewares ``getFile`` passes through).
        max_bytes: the most bytes downloaded, at most :data:`BOT_API_DOWNLOAD_LIMIT` with
            the cloud Bot API.
        timeout_s: the deadline of one download (``getFile`` and the body), seconds.
    """

    __slots__ = ("_bot", "_max_bytes", "_timeout_s")

    def __init__(
        self, bot: Bot, *, max_bytes: int = BOT_API_DOWNLOAD_LIMIT, timeout_s: float = 60.0
    ) -> None:
        if max_bytes < 1 or not timeout_s > 0:
            raise ValueError("max_bytes must be >= 1 and timeout_s > 0")
        self._bot = bot
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"TelegramFiles(max_bytes={self._max_bytes}, timeout_s={self._timeout_s})"

    @property
    def max_bytes(self) -> int:
        """The download cap, bytes."""
        return self._max_bytes

    def check_size(self, file_id: str, declared_bytes: int | None) -> None:
        """Refuse a file the message says is over the cap — before any request.

        Raises:
            TooBigToDownload: ``declared_bytes`` is over :attr:`max_bytes`.
        """
        if declared_bytes is not None and declared_bytes > self._max_bytes:
            raise TooBigToDownload(file_id, declared_bytes, self._max_bytes)

    async def download(self, file_id: str, declared_bytes: int | None) -> bytes:
        """The file's bytes.

        Args:
            file_id: the message's file id.
            declared_bytes: the message's ``file_size`` (``None`` if it has none).

        Raises:
            TooBigToDownload: over the cap — by the message, by ``getFile``, by
                Telegram's own refusal, or counted while streaming.
            DownloadFailed: an expired or wrong file id, a Bot API error, an HTTP
                error, a dropped connection, the deadline.
        """
        self.check_size(file_id, declared_bytes)
        try:
            async with asyncio.timeout(self._timeout_s):
                path, size = await self._locate(file_id)
                self.check_size(file_id, size)
                if self._bot.session.api.is_local:
                    return await self._read_local(file_id, path)
                return await self._stream(file_id, path)
        except TimeoutError:
            raise DownloadFailed(file_id, "timeout", f"over {self._timeout_s} s") from None

    async def _locate(self, file_id: str) -> tuple[str, int | None]:
        try:
            file = await self._bot.get_file(file_id)
        except TelegramBadRequest as exc:
            text = exc.message.lower()
            if "too big" in text:
                raise TooBigToDownload(file_id, None, self._max_bytes) from None
            reason = "file_id" if "file_id" in text or "temporarily" in text else "api"
            raise DownloadFailed(file_id, reason, exc.message[:120]) from None
        except TelegramNetworkError:
            raise DownloadFailed(file_id, "connection", "getFile") from None
        except TelegramAPIError as exc:
            raise DownloadFailed(file_id, "api", type(exc).__name__) from None
        if not file.file_path:
            raise DownloadFailed(file_id, "api", "getFile gave no file_path")
        return file.file_path, file.file_size

    async def _stream(self, file_id: str, path: str) -> bytes:
        session = self._bot.session
        url = session.api.file_url(self._bot.token, path)
        parts: list[bytes] = []
        received = 0
        try:
            stream = session.stream_content(
                url=url, timeout=int(self._timeout_s) + 1, chunk_size=_CHUNK, raise_for_status=True
            )
            async for chunk in stream:
                received += len(chunk)
                if received > self._max_bytes:
                    await stream.aclose()
                    raise TooBigToDownload(file_id, received, self._max_bytes)
                parts.append(chunk)
        except aiohttp.ClientResponseError as exc:  # its text holds the URL: not kept
            raise DownloadFailed(file_id, "http", f"HTTP {exc.status}") from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise DownloadFailed(file_id, "connection", type(exc).__name__) from None
        return b"".join(parts)

    async def _read_local(self, file_id: str, path: str) -> bytes:
        local = str(self._bot.session.api.wrap_local_file.to_local(path))

        def read() -> bytes:
            size = os.stat(local).st_size
            if size > self._max_bytes:
                raise TooBigToDownload(file_id, size, self._max_bytes)
            with open(local, "rb") as handle:
                data = handle.read(self._max_bytes + 1)
            if len(data) > self._max_bytes:
                raise TooBigToDownload(file_id, len(data), self._max_bytes)
            return data

        try:
            return await asyncio.to_thread(read)
        except OSError as exc:
            raise DownloadFailed(file_id, "connection", f"local file: {exc.strerror}") from None
