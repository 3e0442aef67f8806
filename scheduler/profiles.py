"""User profiles: chat, language, timezone, digest time, digest on/off, active.

The bot calls :meth:`ProfileRepository.get_or_create` for every user who writes (and
:meth:`ProfileRepository.mark_active`, since a user who writes again after blocking the
bot is reachable again); /tz, /lang, /digest_time, /digest_on and /digest_off go through
the setters here. The digest runner marks a user inactive on Telegram's 403.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.kernel.clock import Clock
from scheduler.errors import UnknownUser
from scheduler.tables import UserProfile

__all__ = [
    "LANGUAGES",
    "Profile",
    "ProfileRepository",
    "check_timezone",
    "parse_digest_time",
]

#: Languages the bot has templates (and summaries) for: English, Russian, Simplified
#: Chinese, Brazilian Portuguese, Spanish, German, Ukrainian (``bot.text.i18n`` offers the
#: same; a test keeps the two equal).
LANGUAGES = frozenset({"en", "ru", "zh", "pt", "es", "de", "uk"})

_HHMM = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")


def parse_digest_time(text: str) -> time:
    """Parse ``HH:MM`` (24-hour, leading zero optional) into a :class:`~datetime.time`.

    Raises:
        ValueError: not a valid 24-hour ``HH:MM``.
    """
    match = _HHMM.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a time HH:MM: {text!r}")
    return time(int(match.group(1)), int(match.group(2)))


@functools.cache
def _zone_names() -> frozenset[str]:
    # available_timezones() walks tzdata's folders on every call (~4 ms); the set is
    # fixed for the life of the process
    return frozenset(available_timezones())


def check_timezone(name: str) -> str:
    """Return ``name`` if it is a known IANA zone (``Europe/Berlin``).

    Raises:
        ValueError: unknown zone.
    """
    if name not in _zone_names():  # a folder ("Europe") or a long name: OSError
        raise ValueError(f"unknown IANA timezone {name[:64]!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown IANA timezone {name[:64]!r}") from exc
    return name


@dataclass(frozen=True, slots=True)
class Profile:
    """A user's profile as a value.

    Attributes:
        user_id: Telegram user id.
        chat_id: the private chat digests go to.
        language: ``en`` or ``ru``.
        tz: IANA zone name, or ``None`` = the bot's default zone.
        digest_time: local ``HH:MM``.
        digest_enabled: /digest_on (True) or /digest_off.
        active: False after Telegram's 403, until the user writes again.
        created_at: aware UTC.
        last_seen_at: aware UTC of the last update from the user.
    """

    user_id: int
    chat_id: int
    language: str
    tz: str | None
    digest_time: str
    digest_enabled: bool
    active: bool
    created_at: datetime
    last_seen_at: datetime

    @classmethod
    def of(cls, row: UserProfile) -> Profile:
        """Copy an ORM row into a value."""
        return cls(
            row.user_id,
            row.chat_id,
            row.language,
            row.tz,
            row.digest_time,
            row.digest_enabled,
            row.active,
            row.created_at,
            row.last_seen_at,
        )


class ProfileRepository:
    """Reads and writes ``user_profiles``.

    Args:
        session_factory: async session factory on the app's engine.
        clock: the one clock (``created_at``/``last_seen_at``).
        default_language: language of a new profile when Telegram gives none we support.
        default_digest_time: ``HH:MM`` of a new profile (DIGEST_DEFAULT_TIME).
    """

    __slots__ = ("_clock", "_default_language", "_default_time", "_sessions")

    def __init__(
        self,
        session_factory: async_sessionmaker[AsyncSession],
        clock: Clock,
        *,
        default_language: str = "en",
        default_digest_time: str = "09:00",
    ) -> None:
        parse_digest_time(default_digest_time)
        self._sessions = session_factory
        self._clock = clock
        self._default_language = default_language
        self._default_time = default_digest_time

    def __repr__(self) -> str:
        return f"ProfileRepository(default_language={self._default_language!r})"

    async def get(self, user_id: int) -> Profile | None:
        """The profile, or ``None`` for a user never seen."""
        async with self._sessions() as session:
            row = await session.get(UserProfile, user_id)
            return Profile.of(row) if row is not None else None

    async def get_or_create(
        self, user_id: int, chat_id: int, language_code: str | None = None
    ) -> Profile:
        """Return the user's profile, creating it on first contact; refresh ``last_seen_at``.

        Args:
            user_id: Telegram user id.
            chat_id: the private chat (updated when it changed).
            language_code: Telegram's ``language_code``; its first two letters when
                they are one of :data:`LANGUAGES` (``pt-br`` gives ``pt``), else the
                default. Used only when the profile is created (/lang wins later).
        """
        now = self._clock.now()
        language = self._default_language
        if language_code and language_code.lower()[:2] in LANGUAGES:
            language = language_code.lower()[:2]
        for _ in range(2):
            try:
                async with self._sessions() as session, session.begin():
                    row = await session.get(UserProfile, user_id)
                    if row is not None:
                        row.last_seen_at = now
                        row.chat_id = chat_id
                        return Profile.of(row)
                    row = UserProfile(
                        user_id=user_id,
                        chat_id=chat_id,
                        language=language,
                        tz=None,
                        digest_time=self._default_time,
                        digest_enabled=True,
                        active=True,
                        created_at=now,
                        last_seen_at=now,
                    )
                    session.add(row)
                    await session.flush()
                    return Profile.of(row)
            except IntegrityError:
                continue  # created concurrently by another update: read it again
        raise UnknownUser(user_id)

    async def _set(self, user_id: int, **values: Any) -> Profile:
        async with self._sessions() as session, session.begin():
            await session.execute(
                update(UserProfile).where(UserProfile.user_id == user_id).values(**values)
            )
            row = (
                await session.execute(select(UserProfile).where(UserProfile.user_id == user_id))
            ).scalar_one_or_none()
            if row is None:
                raise UnknownUser(user_id)
            await session.refresh(row)
            return Profile.of(row)

    async def set_tz(self, user_id: int, tz: str | None) -> Profile:
        """Set the user's IANA zone (``None`` = back to the default).

        Raises:
            ValueError: unknown zone.
            UnknownUser: no profile.
        """
        return await self._set(user_id, tz=check_timezone(tz) if tz else None)

    async def set_language(self, user_id: int, language: str) -> Profile:
        """Set one of :data:`LANGUAGES`.

        Raises:
            ValueError: another language.
            UnknownUser: no profile.
        """
        if language not in LANGUAGES:
            raise ValueError(f"unsupported language {language!r}")
        return await self._set(user_id, language=language)

    async def set_digest_time(self, user_id: int, hhmm: str) -> Profile:
        """Set the local digest time (``HH:MM``; stored zero-padded).

        Raises:
            ValueError: not a valid time.
            UnknownUser: no profile.
        """
        parsed = parse_digest_time(hhmm)
        return await self._set(user_id, digest_time=parsed.strftime("%H:%M"))

    async def set_digest_enabled(self, user_id: int, enabled: bool) -> Profile:
        """/digest_on (True) or /digest_off (False). Raises ``UnknownUser``."""
        return await self._set(user_id, digest_enabled=enabled)

    async def mark_inactive(self, user_id: int) -> None:
        """Telegram said 403: no digests are generated until :meth:`mark_active`."""
        async with self._sessions() as session, session.begin():
            await session.execute(
                update(UserProfile).where(UserProfile.user_id == user_id).values(active=False)
            )

    async def mark_active(self, user_id: int) -> None:
        """The user wrote again: digests resume."""
        async with self._sessions() as session, session.begin():
            await session.execute(
                update(UserProfile)
                .where(UserProfile.user_id == user_id)
                .values(active=True, last_seen_at=self._clock.now())
            )
