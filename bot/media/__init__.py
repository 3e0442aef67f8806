"""What users send besides text: documents, pages behind links, Telegram files.

* :mod:`bot.media.types` — the values: document kinds, extraction limits, what an
  extraction gives (:class:`~bot.media.types.Extracted`) or why it gave nothing
  (:class:`~bot.media.types.ExtractionFailed`, a value, never an exception: it crosses
  a process boundary).
* :mod:`bot.media.kinds` — which kind a file is, from its bytes first, then its name.
* :mod:`bot.media.pdf_text`, :mod:`bot.media.word_text`, :mod:`bot.media.html_text`,
  :mod:`bot.media.plain_text` — the extractors (pypdf, python-docx, trafilatura with
  selectolax, charset-normalizer), each under the page and character caps.
* :mod:`bot.media.child` — ``python -m bot.media.child``: one extraction in its own
  process, under an address-space and CPU limit.
* :mod:`bot.media.worker` — :class:`~bot.media.worker.ExtractionPool`, the event loop's
  side: prewarmed one-shot worker processes, a wall-clock deadline, a kill.
* :mod:`bot.media.links` — a message that is one link: the page fetched through the
  feeds' guarded transport, then extracted like a document.
* :mod:`bot.media.download` — Telegram files: ``getFile``, the 20 MB limit before any
  download, a size cap while streaming, a deadline (the only module here that needs
  aiogram).
* :mod:`bot.media.errors` — the error tree of downloads and links.

Why a process per extraction: ``docs/decisions/080-documents-are-read-in-a-worker-process.md``.
Nothing is created at import time, and nothing here imports aiogram but
:mod:`bot.media.download`.
"""
