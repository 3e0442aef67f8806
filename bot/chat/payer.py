"""Who pays for a message: the sender, or — for a message sent on behalf of a chat — that chat.

Telegram shows some senders under shared *service* accounts (Bot API, ``Message.from``
and ``sender_chat``; the ids are Telegram's own, the same in every group):

* ``1087968824`` (``GroupAnonymousBot``): every anonymous admin of every group; the
  group is in ``sender_chat``;
* ``777000`` (Telegram): channel posts forwarded automatically into a linked
  discussion group; the channel is in ``sender_chat``;
* ``136817688`` (``Channel_Bot``): messages signed with a channel; the channel is in
  ``sender_chat``.

None of these ids names a person, so none may be an admin (settings refuse them) and
none is a payer: a message with ``sender_chat`` set is charged, limited, queued and
counted under ``sender_chat.id`` (a negative chat id), so each group's anonymous admins
are one payer per group. No user profile is created for such a payer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # settings import this module; reading settings must not load aiogram
    from aiogram.types import Message

__all__ = ["SERVICE_USER_IDS", "is_on_behalf_of_chat", "payer_id"]

#: Telegram service accounts → why they cannot stand for one person.
SERVICE_USER_IDS: dict[int, str] = {
    1087968824: "GroupAnonymousBot, the shared sender of every anonymous group admin",
    777000: "Telegram, the sender of channel posts forwarded into discussion groups",
    136817688: "Channel_Bot, the sender of messages signed with a channel",
}


def is_on_behalf_of_chat(message: Message) -> bool:
    """True when nobody's personal account sent ``message``: it carries ``sender_chat``
    (anonymous admin, channel, linked-channel post) or comes from a service id."""
    if message.sender_chat is not None:
        return True
    return message.from_user is not None and message.from_user.id in SERVICE_USER_IDS


def payer_id(message: Message) -> int | None:
    """The id ``message`` is charged, limited and counted under.

    Returns:
        ``sender_chat.id`` for a message sent on behalf of a chat; the chat's own id
        for a service sender without ``sender_chat`` (never the shared service id);
        else the sender's user id; ``None`` when there is no sender at all.
    """
    if message.sender_chat is not None:
        return message.sender_chat.id
    if message.from_user is None:
        return None
    if message.from_user.id in SERVICE_USER_IDS:
        return message.chat.id
    return message.from_user.id
