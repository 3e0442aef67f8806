"""The language of a reply to an update the profile middleware does not see.

:class:`~bot.middlewares.intake.ProfileMiddleware` puts the user's language (their /lang
choice, else Telegram's ``language_code``) into ``user_ctx`` for chat messages only.
Everything else — a button press, a pre-checkout, a ``my_chat_member`` change, the error
handler, the access gate's and the update rate's templates (both run before the profile)
— asks :class:`ReplyLanguages` (``data["languages"]``, in the workflow data), which reads
the stored choice only when a reply is about to be written, never before the work an
update asks for (a Stop press stops first). A read that fails (a storage failure,
:func:`bot.storage.repos.is_storage_failure`) or takes longer than :data:`READ_S` never
stops the reply: it is then in Telegram's language.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.storage.repos import is_storage_failure
from bot.text.i18n import pick_language

if TYPE_CHECKING:  # aiogram is not imported by wiring's light users (bot.app.polling)
    from aiogram.types import User

__all__ = ["LANGUAGES_KEY", "READ_S", "TELEGRAM_ONLY", "ReplyLanguages", "languages_in"]

log = logging.getLogger(__name__)

#: The workflow data key (and handler argument) of the :class:`ReplyLanguages`.
LANGUAGES_KEY = "languages"
#: Seconds a reply waits for the stored language before it speaks Telegram's.
READ_S = 2.0


class ReplyLanguages:
    """The one place a reply outside the profile middleware learns the user's language.

    Args:
        stored: a user's stored language by user id (``None``: no profile;
            :meth:`bot.app.wiring.ProfileStoreAdapter.stored_language`); ``None``: none
            is stored anywhere (Telegram's language only).
        read_s: the longest wait for ``stored``, seconds.
    """

    def __init__(
        self,
        stored: Callable[[int], Awaitable[str | None]] | None,
        *,
        read_s: float = READ_S,
    ) -> None:
        self._stored = stored
        self._read_s = read_s

    def __repr__(self) -> str:
        return f"ReplyLanguages(stored={self._stored is not None})"

    async def of(self, user: User | None) -> str:
        """``user``'s language: :func:`~bot.text.i18n.pick_language` of the stored choice
        and Telegram's code (English without a user).

        Raises:
            Exception: whatever ``stored`` raises that is not a storage failure (a bug).
        """
        if user is None:
            return pick_language(None, None)
        return pick_language(await self._read(user.id), user.language_code)

    async def _read(self, user_id: int) -> str | None:
        if self._stored is None:
            return None
        try:
            async with asyncio.timeout(self._read_s):
                return await self._stored(user_id)
        except TimeoutError:
            log.warning("stored language not read within %.1f s; Telegram's is used", self._read_s)
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            log.warning("stored language not readable (storage failure); Telegram's is used")
        return None


#: Telegram's language only: the default of a handler's ``languages`` argument (a
#: dispatcher built without the workflow data's).
TELEGRAM_ONLY = ReplyLanguages(None)


def languages_in(data: dict[str, Any]) -> ReplyLanguages:
    """The :class:`ReplyLanguages` of an update's ``data`` (Telegram's language only
    when the dispatcher has none)."""
    found = data.get(LANGUAGES_KEY)
    return found if isinstance(found, ReplyLanguages) else TELEGRAM_ONLY
