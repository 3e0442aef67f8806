"""One long paste, one question: messages Telegram split from one paste are joined.

Telegram clients cut a long paste into messages of at most 4096 characters and send
them within a second. Answering each part would make several provider calls (and
several answers) out of one question. :class:`PasteJoiner` groups them:

* a text message at or near the limit (:data:`NEAR_LIMIT_UTF16` UTF-16 units or more)
  *opens* a paste and becomes its **lead**;
* the next text message of the same payer in the same chat that arrives within
  ``window_s`` seconds (PASTE_JOIN_SECONDS) of the previous part, while that part was
  near the limit, is a **follower**: its text is appended and it gets no answer of
  its own; a follower that is itself near the limit keeps the paste open for another
  ``window_s``, a shorter one closes it;
* anything else — a short message, a message after the window, another sender, another
  chat — is never joined.

Worked timeline (window 1.5 s): 4096 chars at t=0.0 (lead, paste open until 1.5);
4096 at 0.2 (follower, open until 1.7); 1200 at 0.4 (follower, closes the paste) → the
lead goes on at 0.4 with the three texts joined in arrival order. A 4096-character
message with no continuation waits ``window_s`` before it is answered.

Membership is decided in :meth:`PasteJoiner.arrive`, which is synchronous and called
from the first middleware of each update (Telegram's delivery order). Texts are handed
in later, after the exactly-once intake has accepted each ``message_id``
(:meth:`PasteTicket.contribute`); a part dropped before that (a redelivered update, a
group message not addressed to the bot) only :meth:`~PasteTicket.leave`\\ s, so the
joined text holds each accepted message exactly once. Time comes from the injected
clock (``monotonic``/``sleep``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from budget.kernel.clock import Clock

__all__ = ["NEAR_LIMIT_UTF16", "PasteJoiner", "PasteTicket", "utf16_len"]

#: A part this long (UTF-16 code units) may have been cut by the client from a longer
#: paste: Telegram's limit is 4096 (Bot API, sendMessage; the same for user messages),
#: and clients cut at a line or word boundary shortly before it.
NEAR_LIMIT_UTF16 = 3500

#: Scope of a paste: (payer id, chat id).
PasteScope = tuple[int, int]


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units (how Telegram measures message text)."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(eq=False)
class _Paste:
    members: list[int]  # message ids in arrival order, the lead first
    deadline: float  # monotonic seconds: followers may join until then
    open: bool = True  # a short follower (or the lead leaving) closes it
    texts: dict[int, str] = field(default_factory=dict)
    left: set[int] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def settled(self) -> bool:
        return all(m in self.texts or m in self.left for m in self.members)


class PasteTicket:
    """A message's part in a paste, returned by :meth:`PasteJoiner.arrive`."""

    __slots__ = ("_joiner", "_paste", "_scope", "is_lead", "message_id")

    def __init__(
        self, joiner: PasteJoiner, scope: PasteScope, paste: _Paste, message_id: int, lead: bool
    ) -> None:
        self._joiner = joiner
        self._scope = scope
        self._paste = paste
        self.message_id = message_id
        self.is_lead = lead

    def __repr__(self) -> str:
        role = "lead" if self.is_lead else "follower"
        return (
            f"PasteTicket({role}, message_id={self.message_id}, parts={len(self._paste.members)})"
        )

    @property
    def lead_accepted(self) -> bool:
        """The lead's text was handed in (its message is being answered)."""
        return self._paste.members[0] in self._paste.texts

    def contribute(self, text: str) -> bool:
        """Hand in this part's text (after its intake was accepted).

        Returns:
            for a follower, ``True`` when the text joined the lead's question (the
            follower then needs no answer of its own), ``False`` when the lead is
            gone (the follower must be answered on its own); always ``True`` for a lead.
        """
        paste = self._paste
        if not self.is_lead and paste.members[0] in paste.left:
            return False
        paste.texts[self.message_id] = text
        paste.notify()
        return True

    def leave(self) -> None:
        """This part is done (handled, dropped or failed). Idempotent."""
        paste = self._paste
        if self.message_id in paste.left:
            return
        paste.left.add(self.message_id)
        if self.is_lead:
            paste.open = False
            self._joiner._forget(self._scope, paste)
        paste.notify()

    async def question(self, text: str) -> str | None:
        """Hand in this part's ``text`` and say what to answer: for the lead, the whole
        paste joined (waits for it, see :meth:`joined`); for a follower, ``None`` when
        its text joined the lead's question (it gets no answer of its own), else its own
        text (the lead is gone)."""
        if not self.is_lead:
            return None if self.contribute(text) else text
        self.contribute(text)
        return await self.joined()

    async def joined(self) -> str:
        """For the lead: wait until the paste is closed and every part handed in or
        dropped, then return the texts joined in arrival order (nothing added between
        them: the client cut one text).

        Raises:
            RuntimeError: called on a follower.
        """
        if not self.is_lead:
            raise RuntimeError("only the lead of a paste waits for the joined text")
        paste = self._paste
        clock = self._joiner.clock
        while paste.open:
            remaining = paste.deadline - clock.monotonic()
            if remaining <= 0:
                break
            changed = paste.changed
            sleeper = asyncio.ensure_future(clock.sleep(remaining))
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (sleeper, waiter):
                    task.cancel()
                await asyncio.gather(sleeper, waiter, return_exceptions=True)
        paste.open = False
        self._joiner._forget(self._scope, paste)
        while not paste.settled():
            await paste.changed.wait()
        return "".join(paste.texts[m] for m in paste.members if m in paste.texts)


class PasteJoiner:
    """Groups the parts of long pastes (see the module docstring).

    Args:
        clock: the one clock (``monotonic`` seconds, ``sleep``).
        window_s: PASTE_JOIN_SECONDS; 0 turns joining off.
        near_limit_utf16: the length from which a part may continue in the next message.
    """

    __slots__ = ("_open", "clock", "near_limit_utf16", "window_s")

    def __init__(
        self, clock: Clock, window_s: float, near_limit_utf16: int = NEAR_LIMIT_UTF16
    ) -> None:
        self.clock = clock
        self.window_s = window_s
        self.near_limit_utf16 = near_limit_utf16
        self._open: dict[PasteScope, _Paste] = {}

    def __repr__(self) -> str:
        return f"PasteJoiner(window_s={self.window_s}, open={len(self._open)})"

    def arrive(self, scope: PasteScope, message_id: int, text: str) -> PasteTicket | None:
        """Place a text message (synchronously, in delivery order).

        Returns:
            a lead ticket (the message may continue), a follower ticket (it continues
            an open paste), or ``None`` (an ordinary message, never joined).
        """
        if self.window_s <= 0:
            return None
        now = self.clock.monotonic()
        near = utf16_len(text) >= self.near_limit_utf16
        paste = self._open.get(scope)
        if paste is not None and paste.open and now <= paste.deadline:
            paste.members.append(message_id)
            if near:
                paste.deadline = now + self.window_s
            else:
                paste.open = False
                del self._open[scope]
            paste.notify()
            return PasteTicket(self, scope, paste, message_id, lead=False)
        if not near:
            return None
        paste = _Paste(members=[message_id], deadline=now + self.window_s)
        self._open[scope] = paste
        return PasteTicket(self, scope, paste, message_id, lead=True)

    def _forget(self, scope: PasteScope, paste: _Paste) -> None:
        if self._open.get(scope) is paste:
            del self._open[scope]
