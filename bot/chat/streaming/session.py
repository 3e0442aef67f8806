"""One answer's stream from the handler's side, and how answers stream (the settings).

:meth:`StreamSession.open` picks the display by the chat type's mode (``draft`` in
private chats, ``edit``, or ``off``: no session), registers the stream (so it can be
stopped) and hands the cascade its :class:`llm.stream.StreamControl`; the handler always
closes it, then delivers the final answer through :meth:`StreamSession.finish` (edit
mode) or as usual. Times are the injected clock's monotonic seconds
(``docs/decisions/020-clock-rule.md``), the stream control's too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiogram import Bot

from bot.chat.outbox import Outbox
from bot.chat.streaming.displays import DraftDisplay, EditDisplay
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.registry import LiveStream, StreamRegistry, new_draft_id, new_token
from budget.books.stops import StopBook
from budget.kernel.clock import Clock
from llm.stream import StreamControl
from llm.types import Completion

__all__ = ["StreamConfig", "StreamSession", "book_stop"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """How answers stream (from Settings).

    Attributes:
        private: STREAM_MODE_PRIVATE: ``draft``, ``edit`` or ``off``.
        group: STREAM_MODE_GROUP: ``edit`` or ``off``.
        draft_interval_s: STREAM_DRAFT_INTERVAL_MS ÷ 1000, seconds.
        edit_interval_s: STREAM_EDIT_INTERVAL_MS ÷ 1000, seconds.
    """

    private: str = "draft"
    group: str = "edit"
    draft_interval_s: float = 0.6
    edit_interval_s: float = 1.5
    #: true while shedding has switched streaming off (:mod:`bot.ops.shedding`)
    shed: Callable[[], bool] | None = None

    def mode(self, private: bool) -> str:
        """The mode now for a private chat or a group: ``off`` while streaming is shed."""
        if self.shed is not None and self.shed():
            return "off"
        return self.private if private else self.group


class StreamSession:
    """One answer's stream from the handler's side: its control (for the cascade), its
    display and its registry entry. Open with :meth:`open`; always :meth:`close`."""

    __slots__ = ("_display", "_entry", "_metrics", "_received_at", "_registry", "control")

    def __init__(
        self,
        control: StreamControl,
        display: DraftDisplay | EditDisplay,
        entry: LiveStream,
        registry: StreamRegistry,
        metrics: StreamMetrics | None,
        received_at: float,
    ) -> None:
        self.control = control
        self._display = display
        self._entry = entry
        self._registry = registry
        self._metrics = metrics
        self._received_at = received_at

    def __repr__(self) -> str:
        return f"StreamSession({type(self._display).__name__}, {self.control!r})"

    @classmethod
    def open(
        cls,
        *,
        bot: Bot,
        chat_id: int,
        private: bool,
        reply_to: int | None,
        owner_id: int,
        config: StreamConfig,
        registry: StreamRegistry,
        metrics: StreamMetrics | None,
        clock: Clock,
        received_at: float,
    ) -> StreamSession | None:
        """Start showing an answer in ``chat_id``, or ``None`` when its chat type's mode
        is ``off``.

        Args:
            received_at: the clock's monotonic time at which the update arrived (for
                the metrics).
        """
        mode = config.mode(private)
        if mode == "off":
            return None
        control = StreamControl(loop_time=clock.monotonic)

        def shown(at: float) -> None:
            if metrics is not None:
                metrics.first_visible.observe(max(0.0, at - received_at))

        display: DraftDisplay | EditDisplay
        if mode == "draft" and private:
            entry = LiveStream(control, chat_id, owner_id, draft_id=new_draft_id())
            display = DraftDisplay(
                bot,
                chat_id,
                entry.draft_id,
                config.draft_interval_s,
                control,
                clock,
                on_shown=shown,
                metrics=metrics,
                pacer=registry.pacer,
            )
        else:
            entry = LiveStream(control, chat_id, owner_id, token=new_token())
            display = EditDisplay(
                bot,
                chat_id,
                reply_to,
                entry.token,
                config.edit_interval_s,
                control,
                clock,
                on_shown=shown,
                metrics=metrics,
                pacer=registry.pacer,
            )
        control.on_text = display.on_text
        registry.add(entry)
        return cls(control, display, entry, registry, metrics, received_at)

    async def close(self) -> None:
        """The stream ended: no more drafts or edits; leave the registry (idempotent)."""
        self._registry.remove(self._entry)
        await self._display.close()
        if self._metrics is not None and self.control.first_token_at is not None:
            first = max(0.0, self.control.first_token_at - self._received_at)
            self._metrics.first_token.observe(first)
            self.control.first_token_at = None  # observed once

    async def finish(self, markdown: str, outbox: Outbox | None = None) -> bool:
        """Deliver the final answer through the display when it owns a message (edit
        mode; a flood wait hands the rest to ``outbox``); ``False`` when the caller
        sends it as usual (drafts, or nothing shown).

        Raises:
            aiogram.exceptions.TelegramAPIError: as :meth:`EditDisplay.finish`.
        """
        if isinstance(self._display, EditDisplay):
            return await self._display.finish(markdown, outbox)
        return False


async def book_stop(
    completion: Completion, stop_book: StopBook | None, metrics: StreamMetrics | None
) -> None:
    """A stopped answer: flag its hold in the ledger (``/budget`` totals the stops) and
    count it, with the output tokens it did not generate (held ``max_tokens`` − output).
    A failure to flag is logged: the answer and its settlement stand."""
    if metrics is not None:
        metrics.stops.labels(by=completion.stopped).inc()
        saved = completion.max_tokens - completion.usage.output_tokens
        if saved > 0:
            metrics.tokens_saved.inc(saved)
    if stop_book is not None and completion.hold_id:
        try:
            await stop_book.mark(completion.hold_id)
        except Exception:  # the answer and its settlement stand; only the flag is lost
            log.exception("could not flag hold %s as stopped", completion.hold_id)
