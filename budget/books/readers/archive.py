"""A ZIP upload (DeepSeek serves its usage download as one; an operator may zip OpenAI's
usage and costs files together): its files, within the size caps, or a clear refusal.

Caps: at most :data:`MAX_MEMBERS` files, everything unpacked at most
:data:`~budget.books.readers.lines.MAX_EXPORT_BYTES` (checked on the sizes the ZIP
states and again while unpacking, so a ZIP that lies about them is cut off), no
encrypted member. Folders, macOS metadata (``__MACOSX/``, ``._*``) and hidden files are
skipped. A ZIP that is an Excel workbook (``.xlsx``) is named as such.
"""

from __future__ import annotations

import io
import zipfile

from budget.books.periods import ExportFileError
from budget.books.readers.lines import MAX_EXPORT_BYTES

__all__ = ["MAX_MEMBERS", "is_zip", "unzip"]

#: Most files a ZIP upload may hold.
MAX_MEMBERS = 8


def is_zip(data: bytes) -> bool:
    """True when ``data`` starts like a ZIP archive."""
    return data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06")


def _skipped(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return name.endswith("/") or name.startswith("__MACOSX/") or base.startswith(".")


def unzip(data: bytes, file_name: str) -> list[tuple[str, bytes]]:
    """The files of a ZIP upload, ``(name inside the ZIP, bytes)`` in the ZIP's order.

    Raises:
        ExportFileError: not a readable ZIP, a workbook, encrypted, too many files,
            more than 20 MiB unpacked, no file.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise ExportFileError(f"{file_name} looks like a ZIP but cannot be read") from None
    with archive:
        infos = [i for i in archive.infolist() if not _skipped(i.filename)]
        names = {i.filename for i in infos}
        if "[Content_Types].xml" in names or any(n.startswith("xl/") for n in names):
            raise ExportFileError(
                f"{file_name} is an Excel workbook: save the usage sheet as CSV UTF-8"
            )
        if not infos:
            raise ExportFileError(f"{file_name} is a ZIP with no file in it")
        if len(infos) > MAX_MEMBERS:
            raise ExportFileError(
                f"{file_name} holds {len(infos)} files (at most {MAX_MEMBERS}): send one "
                "period's usage export"
            )
        if any(i.flag_bits & 0x1 for i in infos):
            raise ExportFileError(f"{file_name} is encrypted: send it without a password")
        if sum(i.file_size for i in infos) > MAX_EXPORT_BYTES:
            raise ExportFileError(f"{file_name} unpacks to over 20 MiB; export a shorter period")
        return _read(archive, infos, file_name)


def _read(
    archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], file_name: str
) -> list[tuple[str, bytes]]:
    left = MAX_EXPORT_BYTES
    found: list[tuple[str, bytes]] = []
    for info in infos:
        try:
            with archive.open(info) as member:
                body = member.read(left + 1)
        except (zipfile.BadZipFile, NotImplementedError, ValueError, OSError, EOFError):
            raise ExportFileError(f"{file_name}: {info.filename} cannot be unpacked") from None
        if len(body) > left:
            raise ExportFileError(f"{file_name} unpacks to over 20 MiB; export a shorter period")
        left -= len(body)
        found.append((info.filename.rsplit("/", 1)[-1], body))
    return found
