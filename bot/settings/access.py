"""The settings of who may use the bot and on what terms: the access mode and its lists,
invites, the plans file (whose plans carry their prices in Telegram Stars) and the
fair share of the free keys' daily quotas.

A class of its own (:class:`AccessSettings`, one base of :class:`bot.settings.Settings`)
because the section has its own readers — the access gate, the invites, the plans —
as ``docs/decisions/060-settings-stay-flat.md`` foresees; the names stay flat
(``ACCESS_MODE``, ``ALLOWED_USER_IDS``…) and are documented in ``.env.example``.

Units are in the names: ``*_hours`` hours, ``*_per_hour`` a count per hour;
``FREE_SHARE_MAX`` is a share (0–1).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode

from bot.chat.payer import SERVICE_USER_IDS
from bot.settings.checks import comma_ids

__all__ = ["AccessMode", "AccessSettings", "parse_chat_ids", "parse_user_ids"]

AccessMode = Literal["open", "allowlist"]

_ID = re.compile(r"-?[0-9]{1,19}")
#: Telegram user ids fit in 52 bits (Bot API, "User.id"); chat ids of groups too.
_MAX_ID = 2**52


def _ids(value: object, name: str, *, chats: bool) -> object:
    """A comma-separated list of ids as written → a frozenset of ints: of users
    (positive) or, ``chats``, of groups, supergroups and channels (negative: Telegram
    gives a chat other than a private one a negative id; a positive one is a person's)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return value
    error = f"{name} must be comma-separated Telegram ids (digits, '-' for groups)"
    ids = comma_ids(value, _ID, error, longest=20)
    for i in sorted(ids):
        if chats and i > 0:
            raise ValueError(
                f"{name} contains {str(i)[:24]}, which is a user's id: group and channel ids"
                " are negative (a person goes in ALLOWED_USER_IDS)"
            )
        if i == 0 or abs(i) > 2**63 - 1 or (i < 0 and not chats):
            raise ValueError(f"{name} contains {str(i)[:24]}, which is no Telegram user id")
        if i in SERVICE_USER_IDS:
            raise ValueError(f"{name} contains {i} ({SERVICE_USER_IDS[i]}): it is not one person")
    return ids


def parse_user_ids(value: object) -> object:
    """``ALLOWED_USER_IDS`` (``"42, 7"``) → a frozenset of positive user ids."""
    return _ids(value, "ALLOWED_USER_IDS", chats=False)


def parse_chat_ids(value: object) -> object:
    """``ALLOWED_CHAT_IDS`` (``"-1001234567890, -42"``) → a frozenset of chat ids (groups
    and supergroups are negative; a positive id is refused).

    Raises:
        ValueError: not a list of ids, or an id that is 0, positive or out of range.
    """
    return _ids(value, "ALLOWED_CHAT_IDS", chats=True)


#: Each id-list setting's parser, by field name.
_ID_LISTS = {"allowed_user_ids": parse_user_ids, "allowed_chat_ids": parse_chat_ids}


class AccessSettings(BaseSettings):
    """Who may use the bot and on what terms (a base of :class:`bot.settings.Settings`).

    Attributes:
        access_mode: ``open`` (anyone not banned) or ``allowlist`` (the lists below,
            admins, users let in by ``/allow`` or an invite, members of an allowed
            group in that group).
        allowed_user_ids / allowed_chat_ids: ALLOWED_USER_IDS, ALLOWED_CHAT_IDS.
        invite_ttl_hours: how long an ``/invite`` link works unless it says otherwise.
        invite_tries_per_hour: wrong invite codes one user may try per hour; the next
            ones get the "too many tries" template without being checked.
        plans_file: PLANS_FILE, the plans (TOML); unset: the shipped ``free`` and ``pro``.
        free_share_max: FREE_SHARE_MAX, the most of any free key's daily request or
            token quota one user or group may take while others are active (past it:
            the next free key, else a template — never the paid anchor); 1 keeps no
            share (:mod:`llm.keys.shares`).
        wallet_topup_stars: WALLET_TOPUP_STARS, the amounts (Stars) ``/topup`` offers.
        wallet_musd_per_star: WALLET_MUSD_PER_STAR, what one Star credits in a wallet
            (µUSD); unset: no top-ups are sold (``docs/access.md#the-wallet`` notes
            where a rate comes from).
    """

    access_mode: AccessMode = "open"
    allowed_user_ids: Annotated[frozenset[int], NoDecode] = frozenset()
    allowed_chat_ids: Annotated[frozenset[int], NoDecode] = frozenset()
    invite_ttl_hours: int = Field(168, ge=1, le=8_760)
    invite_tries_per_hour: int = Field(5, ge=1, le=1_000)
    plans_file: str | None = None
    free_share_max: Decimal = Field(Decimal("0.25"), gt=0, le=1, decimal_places=6)
    wallet_topup_stars: Annotated[tuple[int, ...], NoDecode] = (100, 500, 1000)
    wallet_musd_per_star: int | None = Field(None, ge=1, le=1_000_000)

    @field_validator("wallet_topup_stars", mode="before")
    @classmethod
    def _topups(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not all(p.isdigit() and 1 <= int(p) <= 100_000 for p in parts):
            raise ValueError("WALLET_TOPUP_STARS must be comma-separated amounts of 1 to 100000")
        return tuple(sorted({int(p) for p in parts}))

    @field_validator("wallet_musd_per_star", mode="before")
    @classmethod
    def _no_rate(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("access_mode", mode="before")
    @classmethod
    def _mode_any_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("allowed_user_ids", "allowed_chat_ids", mode="before")
    @classmethod
    def _id_lists(cls, value: object, info: ValidationInfo) -> object:
        return _ID_LISTS[str(info.field_name)](value)

    @field_validator("plans_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value
