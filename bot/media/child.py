"""``python -m bot.media.child --memory-mb N [--nice K]``: one document extraction in a process of
its own, started by :class:`bot.media.worker.ExtractionPool`.

The protocol, over the process's standard streams (binary):

1. the child limits itself — address space (``RLIMIT_AS``) to ``N`` MiB, no core
   files —, imports the extractors, then writes ``ready\\n``;
2. the parent writes one JSON header line ``{"kind", "size", "limits"}`` and then
   exactly ``size`` bytes of the document;
3. the child caps its CPU time (``RLIMIT_CPU``: the deadline plus one second, a backstop
   to the parent's wall-clock kill), extracts, writes one JSON result line
   (:meth:`bot.media.types.Extracted.to_json` or
   :meth:`~bot.media.types.ExtractionFailed.to_json`, with its peak resident set and
   time) — for an extracted text, without the text but with ``text_bytes``, the text
   following as that many bytes of UTF-8 (decoding it costs the loop a fraction of
   parsing it out of JSON: ~1 ms for 2 MB) — and exits.

The child runs at a lower scheduling priority (``nice`` +``--nice``, :data:`NICE` by
default): on a busy machine the bot's event loop gets most of the CPU before an extraction
does, and the extraction still moves (not ``SCHED_IDLE``, under which a machine kept busy
by other work starved it into its deadline: docs/decisions/288-*.md). Measured in ``bench/bot.py
--media`` (``docs/benchmarks.md``).

An allocation past the address-space limit raises ``MemoryError`` in the extractor,
reported as ``MEMORY``; ``RecursionError`` (form XObjects drawing each other) as
``UNREADABLE``. Anything a library prints goes to standard error: the result line is
written to a private duplicate of the original standard output.

The reading time it reports is ``time.perf_counter`` of this process: a measurement
sent back, not a decision (docs/decisions/020-clock-rule.md governs the bot's process,
which bounds the worker with a deadline on its pipes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
import warnings
from collections.abc import Callable
from typing import BinaryIO

from bot.media.types import (
    DocumentKind,
    Extracted,
    ExtractionFailed,
    ExtractionLimits,
    ExtractionResult,
    Refusal,
)

__all__ = ["NICE", "extract", "extractors", "lower_priority", "main", "peak_resident_kb"]

Extractor = Callable[[bytes, ExtractionLimits], ExtractionResult]

#: The longest header line accepted, bytes.
MAX_HEADER_BYTES = 4096
#: How much lower than the bot's a worker's scheduling priority is, by default (the
#: lowest: 19; measured in bench/media.py against 10, docs/decisions/080-…).
NICE = 19


def extractors() -> dict[DocumentKind, Extractor]:
    """The reader of each kind (imported here, not at module level: a worker lowers its
    priority and limits itself before it pays for these imports)."""
    from bot.media.html_text import extract_html
    from bot.media.pdf_text import extract_pdf
    from bot.media.plain_text import extract_text
    from bot.media.word_text import extract_docx

    return {
        DocumentKind.PDF: extract_pdf,
        DocumentKind.DOCX: extract_docx,
        DocumentKind.HTML: extract_html,
        DocumentKind.TEXT: extract_text,
    }


def extract(kind: DocumentKind, data: bytes, limits: ExtractionLimits) -> ExtractionResult:
    """Run the extractor of ``kind`` in this process (no limits set here: the caller's
    process is the one limited). ``MemoryError`` and ``RecursionError`` become results."""
    try:
        return extractors()[kind](data, limits)
    except MemoryError:
        return ExtractionFailed(Refusal.MEMORY, kind, limit=limits.memory_mb)
    except RecursionError:
        return ExtractionFailed(Refusal.UNREADABLE, kind, detail="nesting too deep")


def lower_priority(nice: int) -> None:
    """Lower this process's scheduling priority by ``nice`` steps (the kernel caps the
    result at 19)."""
    os.nice(nice)


def _limit_memory(memory_mb: int) -> None:
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _limit_cpu(seconds: float) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    soft = math.ceil(spent + seconds) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _read_job(stdin: BinaryIO) -> tuple[DocumentKind, ExtractionLimits, bytes]:
    header = json.loads(stdin.readline(MAX_HEADER_BYTES))
    limits = ExtractionLimits(**header["limits"])
    size = int(header["size"])
    data = stdin.read(size)
    if len(data) != size:
        raise EOFError(f"{len(data)} of {size} bytes")
    return DocumentKind(header["kind"]), limits, data


def peak_resident_kb() -> int:
    """This process's peak resident set, KiB: ``VmHWM`` of ``/proc/self/status``.

    Not ``getrusage().ru_maxrss``: Linux carries that across ``execve`` (the kernel folds
    the old address space's high-water mark into it), so a worker forked from a large
    process would report its parent's size. Elsewhere (no ``/proc``), ``ru_maxrss``."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _result_bytes(result: ExtractionResult, seconds: float) -> bytes:
    """The header line and, for an extracted text, the text's UTF-8 bytes after it."""
    peak = peak_resident_kb()
    body = result.to_json()
    body["peak_memory_kb"] = peak
    text = b""
    if isinstance(result, Extracted):
        body["seconds"] = round(seconds, 4)
        text = str(body.pop("text")).encode("utf-8")
        body["text_bytes"] = len(text)
    return json.dumps(body).encode("ascii") + b"\n" + text


def main(argv: list[str] | None = None) -> None:
    """The worker's life: limit, announce, read one job, answer, exit."""
    parser = argparse.ArgumentParser(prog="python -m bot.media.child")
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--nice", type=int, default=NICE)
    args = parser.parse_args(argv)
    lower_priority(args.nice)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to standard error
    warnings.simplefilter("ignore")  # a hostile file's warnings are not ours to show
    _limit_memory(args.memory_mb)
    extractors()  # the imports, before "ready": a job then pays none of them
    out.write(b"ready\n")
    out.flush()
    kind, limits, data = _read_job(sys.stdin.buffer)
    _limit_cpu(limits.timeout_s)
    started = time.perf_counter()
    result = extract(kind, data, limits)
    del data
    out.write(_result_bytes(result, time.perf_counter() - started))
    out.flush()


if __name__ == "__main__":
    main()
