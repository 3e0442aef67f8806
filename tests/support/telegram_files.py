"""Files in the fake Bot API (:mod:`tests.support.telegram`): what users send — voice
notes, audio, video notes, photos, documents — held as Telegram holds them, served by
``getFile`` and ``/file/bot<token>/<file_path>`` as Telegram serves them.

Shapes, from the real updates in ``tests/fixtures/media/telegram_updates/`` (nutgram's
fixtures) and the Bot API reference (core.telegram.org/bots/api):

* ``voice`` {``duration``, ``mime_type``, ``file_id``, ``file_unique_id``, ``file_size``};
* ``audio`` the same plus ``performer``, ``title``, ``file_name``;
* ``video_note`` {``duration``, ``length``, ``file_id``, ``file_unique_id``, ``file_size``};
* ``photo`` a list of ``PhotoSize`` {``file_id``, ``file_unique_id``, ``file_size``,
  ``width``, ``height``}, in the order given (Telegram's is not sorted by size);
* ``document`` {``file_id``, ``file_unique_id``, ``file_name``, ``mime_type``,
  ``file_size``};
* ``getFile`` → ``File`` {``file_id``, ``file_unique_id``, ``file_size``, ``file_path``},
  ``file_path`` in Telegram's folders (``voice/file_3.oga``, ``photos/file_4.jpg``,
  ``documents/file_5.pdf``, ``music/file_6.mp3``, ``video_notes/file_7.mp4``).

Errors as Telegram words them: an unknown id → 400 ``Bad Request: wrong file_id or the
file is temporarily unavailable`` (the real body in ``response.getFile_error_400_…``),
over the 20 MB download limit → 400 ``Bad Request: file is too big``.

Test knobs: :meth:`FileStore.add` takes a ``file_size`` that differs from the bytes (a
message that lies about its size), :meth:`FileStore.throttle` serves a file slowly, and
:attr:`FileStore.downloads` records every download (a test asserts none happened).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from dataclasses import dataclass, field

from aiohttp import web

__all__ = ["DOWNLOAD_LIMIT_BYTES", "FileStore", "StoredFile"]

#: The cloud Bot API's download limit: "bots can download files of up to 20MB in size"
#: (core.telegram.org/bots/api#getfile).
DOWNLOAD_LIMIT_BYTES = 20 * 1024 * 1024

_FOLDERS = {
    "voice": ("voice", ".oga"),
    "audio": ("music", ".mp3"),
    "video_note": ("video_notes", ".mp4"),
    "photo": ("photos", ".jpg"),
    "document": ("documents", ""),
}


@dataclass(slots=True)
class StoredFile:
    """A file the fake holds.

    Attributes:
        file_id: the id messages carry.
        file_unique_id: the stable id.
        file_path: where ``/file/bot<token>/`` serves it.
        data: its bytes.
        declared_size: the ``file_size`` messages and ``getFile`` report (the bytes'
            length unless a test made it lie).
        bytes_per_s: serve at this rate (``None``: at once).
    """

    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    declared_size: int
    bytes_per_s: float | None = None


@dataclass(slots=True)
class FileStore:
    """The fake's files, by id and by path."""

    by_id: dict[str, StoredFile] = field(default_factory=dict)
    by_path: dict[str, StoredFile] = field(default_factory=dict)
    #: every file path downloaded, in order
    downloads: list[str] = field(default_factory=list)
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def add(
        self, data: bytes, kind: str, *, extension: str = "", file_size: int | None = None
    ) -> StoredFile:
        """Hold ``data`` as a file of ``kind`` (``voice``, ``audio``, ``video_note``,
        ``photo``, ``document``); ``file_size`` is what messages will say it is."""
        folder, default_ext = _FOLDERS[kind]
        n = next(self._numbers)
        digest = hashlib.sha256(data).hexdigest()
        prefix = {"voice": "AwAC", "audio": "CQAC", "video_note": "DQAC", "photo": "AgAC"}
        file_id = f"{prefix.get(kind, 'BQAC')}{n:04d}{digest[:28]}"
        stored = StoredFile(
            file_id=file_id,
            file_unique_id=f"AgAD{n:04d}{digest[:8]}",
            file_path=f"{folder}/file_{n}{extension or default_ext}",
            data=data,
            declared_size=len(data) if file_size is None else file_size,
        )
        self.by_id[file_id] = stored
        self.by_path[stored.file_path] = stored
        return stored

    def throttle(self, file_id: str, bytes_per_s: float) -> None:
        """Serve ``file_id`` at ``bytes_per_s`` (for download deadline tests)."""
        self.by_id[file_id].bytes_per_s = bytes_per_s

    def get_file(self, file_id: str) -> dict[str, object] | str:
        """``getFile``'s result, or the error description Telegram gives."""
        stored = self.by_id.get(file_id)
        if stored is None:
            return "Bad Request: wrong file_id or the file is temporarily unavailable"
        if len(stored.data) > DOWNLOAD_LIMIT_BYTES:
            return "Bad Request: file is too big"
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": stored.declared_size,
            "file_path": stored.file_path,
        }

    async def serve(self, request: web.Request, path: str) -> web.StreamResponse:
        """The download of ``path`` (the token already checked by the caller)."""
        stored = self.by_path.get(path)
        if stored is None:
            return web.Response(status=404, text="Not Found")
        self.downloads.append(path)
        if stored.bytes_per_s is None:
            return web.Response(body=stored.data, content_type="application/octet-stream")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(stored.data)
        await response.prepare(request)
        step = max(1, int(stored.bytes_per_s / 20))  # 20 writes a second
        try:
            for at in range(0, len(stored.data), step):
                await response.write(stored.data[at : at + step])
                await asyncio.sleep(0.05)
            await response.write_eof()
        except ConnectionError:
            pass
        return response
