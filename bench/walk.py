"""The walk of one private chat message: which product modules it enters, in order.

A structural measure, not a timing: the real bot (``create_app``, in process) on a
SQLite file, answers in one piece (``STREAM_MODE_PRIVATE=off``), one Groq key on the
loopback fake answering at once. After a warm-up message from another user (so first-use
work is out of the way), one message is traced with :func:`sys.setprofile` on the event
loop's thread and :func:`threading.setprofile` on the threads the bot starts (the SQLite
writer), from the moment it is injected until its reply was sent and the writer is idle.

Printed: every product module entered (``bot``, ``budget``, ``llm``, ``scheduler``), in
the order first entered, with the first function; then the figures ``docs/architecture.md``
quotes, beside the targets of the house redesign (at most 25 modules, the ledger entered
at most twice):

* modules — distinct product modules entered;
* ledger entries — calls into the ledger object (``budget.ledger.Ledger`` and its
  ``budget.holding.LedgerHolds``, ``budget.admin.LedgerAdmin`` and ``budget.settle.LedgerSettle``
  bases) from outside
  those modules;
* ledger steps — the store steps those entries ran (calls from the ledger into its
  store, ``budget.storage.base.LedgerStore``): each is one trip to the database (on
  SQLite, to the writer thread) — ``docs/decisions/132-two-ledger-steps.md``;
* cross-package calls — calls whose caller is in another top-level package than the
  callee (a coroutine resumed is not a new call).

The figures vary by a module or two between runs (which background loop happens to run
in the window); run it twice. Usage: ``python bench/walk.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.harness import bot_environment
from tests.support.inprocess import InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

PACKAGES = frozenset({"bot", "budget", "llm", "scheduler"})
LEDGER_MODULES = frozenset({"budget.ledger", "budget.holding", "budget.admin", "budget.settle"})
STORE_MODULES = frozenset(
    {"budget.storage.base", "budget.storage.sqlite.store", "budget.storage.postgres.store"}
)
TARGET_MODULES = 25
TARGET_LEDGER_ENTRIES = 2


class Walk:
    """What the profiler saw: each frame once (a resumed coroutine keeps its frame)."""

    def __init__(self) -> None:
        self.active = False
        self.first: dict[str, str] = {}  # module → first function entered, in order
        self.ledger_entries: list[str] = []
        self.ledger_steps: list[str] = []
        self.crossings = 0
        self._seen: set[int] = set()
        self._frames: list[FrameType] = []  # kept alive, so no id is reused
        self._lock = threading.Lock()

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        """A ``sys.setprofile`` hook: records the first ``call`` of each product frame."""
        if event != "call" or not self.active:
            return
        module = str(frame.f_globals.get("__name__", ""))
        if module.split(".")[0] not in PACKAGES:
            return
        with self._lock:
            if id(frame) in self._seen:
                return
            self._seen.add(id(frame))
            self._frames.append(frame)
            self.first.setdefault(module, frame.f_code.co_name)
            caller = frame.f_back
            while caller is not None and caller.f_globals.get("__name__", "") in ("", None):
                caller = caller.f_back
            origin = str(caller.f_globals.get("__name__", "")) if caller is not None else ""
            if origin.split(".")[0] in PACKAGES and origin.split(".")[0] != module.split(".")[0]:
                self.crossings += 1
            if (
                module in LEDGER_MODULES
                and origin not in LEDGER_MODULES
                and not frame.f_code.co_name.startswith("_")
            ):
                self.ledger_entries.append(f"{frame.f_code.co_name} (from {origin})")
            if (
                module in STORE_MODULES
                and origin in LEDGER_MODULES
                and not frame.f_code.co_name.startswith("_")
            ):
                self.ledger_steps.append(frame.f_code.co_name)


async def main() -> None:
    """Start the bot, warm it up, trace one message and print the walk."""
    walk = Walk()
    threading.setprofile(walk.profile)  # threads started from here on (the writer)
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeTelegram() as telegram, FakeProviders() as providers:
            env = bot_environment(
                telegram=telegram,
                database_path=Path(tmp) / "walk.db",
                provider_base_urls={"groq": providers.base_urls["groq"]},
                extra={"LOG_LEVEL": "WARNING"},
            )
            bot = InProcessBot(env, telegram=telegram)
            await bot.start()
            try:
                for user, text in ((7, "Hello there"), (42, "What is 2+2?")):
                    providers.script("groq", {"text": "Four.", "prompt_tokens": 30})
                    mark = telegram.mark()
                    if user == 42:
                        walk.active = True
                        sys.setprofile(walk.profile)
                    telegram.inject_message(user, text)
                    await telegram.wait_sent(user, since=mark, timeout=30)
                    await asyncio.sleep(0.5)  # the intake outcome and posted writes
                    sys.setprofile(None)
                    walk.active = False
            finally:
                threading.setprofile(None)
                await bot.stop()
    for module, function in walk.first.items():
        print(f"  {module:<34} {function}")
    print(f"modules: {len(walk.first)} (target <= {TARGET_MODULES})")
    print(f"ledger entries: {len(walk.ledger_entries)} (target <= {TARGET_LEDGER_ENTRIES})")
    for entry in walk.ledger_entries:
        print(f"  {entry}")
    steps = len(walk.ledger_steps)
    print(
        f"ledger steps: {steps} (target <= {TARGET_LEDGER_ENTRIES}): {', '.join(walk.ledger_steps)}"
    )
    print(f"cross-package calls: {walk.crossings}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    asyncio.run(main())
