"""/digest_now [user id]: run a user's digest now, with its progress edited into one
message (at most once per :data:`PROGRESS_EDIT_INTERVAL_S`, final steps at once)."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.handlers.admin.base import parse_user_id, reply
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.types import RefusalReason
from scheduler.runner import DigestRunner
from scheduler.tables import RunStatus
from scheduler.types import ProgressStep, Step

__all__ = ["PROGRESS_EDIT_INTERVAL_S", "describe_status", "describe_step", "on_digest_now"]

log = logging.getLogger(__name__)

#: /digest_now edits its progress message at most this often (seconds): Telegram
#: limits edits of one message like any other message to a chat.
PROGRESS_EDIT_INTERVAL_S = 2.0

_STEPS: dict[Step, str] = {
    Step.STARTED: "started",
    Step.FETCHED: "fetched {count} posts",
    Step.SUMMARISED: "summarising {count}/{total}",
    Step.DEFERRED: "postponed by the budget ({reason}); it will go out when the limit resets",
    Step.EMPTY: "nothing new to send",
    Step.DELIVERED: "delivered",
    Step.DELIVERY_RETRY: "Telegram asked to wait {retry_after_s:g} s before sending",
    Step.RECIPIENT_GONE: "the user has blocked the bot; marked inactive",
    Step.ALREADY_SENT: "today's digest already ran",
    Step.NO_PROFILE: "this user has never written to the bot",
    Step.ELSEWHERE: "another bot process is making or sending today's digest now",
    Step.NOT_ALLOWED: "this user may not use the bot (not allowed in a private chat, or "
    "banned): no digest is made or sent",
}

_STATUSES: dict[RunStatus, str] = {
    RunStatus.PENDING: "in progress",
    RunStatus.DEFERRED: "postponed by the budget; it will go out when the limit resets",
    RunStatus.READY: "generated; delivery pending",
    RunStatus.SENT: "sent",
    RunStatus.EMPTY: "nothing new to send",
    RunStatus.FAILED_DELIVERY: "could not be delivered",
}


#: A run the kill switch postponed: a kill has no reset, an admin lifts it.
_KILLED = "postponed: the kill switch is on; it will go out once an admin lifts it (/unkill)"


def describe_step(progress: ProgressStep) -> tuple[str, bool]:
    """A runner progress step → (readable text, is it final)."""
    if progress.step is Step.DEFERRED and progress.reason is RefusalReason.KILL:
        return _KILLED, progress.step.final
    reason = progress.reason.value if progress.reason is not None else ""
    text = _STEPS[progress.step].format(
        count=progress.count,
        total=progress.total,
        reason=reason,
        retry_after_s=progress.retry_after_s,
    )
    return text, progress.step.final


def describe_status(status: RunStatus, reason: RefusalReason | None = None) -> str:
    """A digest run's status after /digest_now, as text (``reason``: the refusal that
    postponed it, if one did)."""
    if status is RunStatus.DEFERRED and reason is RefusalReason.KILL:
        return _KILLED
    return _STATUSES[status]


class ProgressMessage:
    """One message showing a digest run's progress, edited in place.

    Args:
        bot: the bot.
        chat_id: the admin's chat.
        message_id: the message to edit.
        target: the user whose digest runs (named in every line).
        clock: the one clock (the edit interval).

    Attributes:
        last_step: the runner's latest step (``started`` until one comes).
        last_reason: the refusal of the latest step that had one (``None``: none).
    """

    __slots__ = (
        "_bot",
        "_chat_id",
        "_clock",
        "_last_edit",
        "_message_id",
        "_shown",
        "_target",
        "last_reason",
        "last_step",
    )

    def __init__(self, bot: Bot, chat_id: int, message_id: int, target: int, clock: Clock) -> None:
        self._bot = bot
        self._chat_id = chat_id
        self._message_id = message_id
        self._target = target
        self._clock = clock
        self._last_edit = clock.monotonic() - PROGRESS_EDIT_INTERVAL_S
        self._shown = ""
        self.last_step = Step.STARTED
        self.last_reason: RefusalReason | None = None

    async def show(self, text: str, *, force: bool) -> None:
        """Edit ``text`` in, unless it is already shown or (``force`` aside) the last edit
        was less than the interval ago. A failed edit is logged: progress is cosmetic."""
        now = self._clock.monotonic()
        if text == self._shown or (not force and now - self._last_edit < PROGRESS_EDIT_INTERVAL_S):
            return
        self._last_edit, self._shown = now, text
        try:
            await self._bot.edit_message_text(
                f"Digest for {self._target}: {text}",
                chat_id=self._chat_id,
                message_id=self._message_id,
            )
        except TelegramAPIError:  # progress is cosmetic; the digest goes on
            log.debug("progress edit failed", exc_info=True)

    async def step(self, step: ProgressStep) -> None:
        """The runner's progress callback."""
        self.last_step = step.step
        if step.reason is not None:
            self.last_reason = step.reason
        text, final = describe_step(step)
        await self.show(text, force=final)


async def on_digest_now(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, runner: DigestRunner
) -> None:
    """/digest_now [user id] (default: the sender's own digest)."""
    arg = (command.args or "").strip()
    if arg:
        target = parse_user_id(arg)
        if target is None:
            await reply(bot, message, "Usage: /digest_now [user id]", clock)
            return
    else:
        target = message.from_user.id if message.from_user else 0
    sent = await bot.send_message(message.chat.id, f"Digest for {target}: starting…")
    progress = ProgressMessage(bot, message.chat.id, sent.message_id, target, clock)
    try:
        outcome = await runner.run_now(target, progress.step)
    except HoldRefused as exc:
        await progress.show(f"refused by the ledger ({exc.refusal.reason})", force=True)
        return
    if progress.last_step is Step.ALREADY_SENT:
        # nothing ran now: say how today's run ended earlier, not "— 0 posts"
        done = describe_status(outcome.status, progress.last_reason)
        await progress.show(f"already done today ({done})", force=True)
        return
    if progress.last_step in (Step.ELSEWHERE, Step.NO_PROFILE, Step.NOT_ALLOWED):
        return  # this process made nothing: the step's line is the whole answer
    await progress.show(
        f"{describe_status(outcome.status, progress.last_reason)} — {outcome.posts} posts, "
        f"{outcome.llm_calls} LLM calls, {outcome.cache_hits} from the cache, "
        f"{outcome.paid_calls} paid",
        force=True,
    )
