"""Loopback fakes of the services Kopek talks to, for tests and the end-to-end harness.

* :mod:`tests.support.telegram` — the Bot API server (``/bot<token>/<method>``) with
  Telegram's text limits and entity parsing, scriptable failures and a test API.
* :mod:`tests.support.tme` — the ``t.me/s/<channel>`` web preview server (saved real
  pages or generated ones in the real markup) and arbitrary registered paths (feeds).
* ``tests.support.providers`` — the LLM provider fakes (written separately).

Every fake binds 127.0.0.1 on a random port; nothing is created at import time.
"""
