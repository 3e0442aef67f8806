"""The access decision, pure: may this update's sender use the bot here?

Checked before anything else (no profile, no intake record, no ledger step, no provider
call comes first), in this order::

    banned (the sender, or the chat it writes in)      -> IGNORE   (every mode)
    an admin writing as themselves                     -> ALLOW
    ACCESS_MODE=open                                   -> ALLOW
    allowlist, a group or supergroup:
        the group allowed (ALLOWED_CHAT_IDS, /allow, an admin added the bot)
                                                       -> ALLOW    (any member, there)
        otherwise                                      -> LEAVE    (said once, leaveChat)
    allowlist, a private chat:
        the sender allowed (ALLOWED_USER_IDS, /allow, an invite)
                                                       -> ALLOW
        otherwise                                      -> REFUSE   (one template a day)
    anything else (a channel post)                     -> IGNORE

The *sender* of a message sent on behalf of a chat (an anonymous admin, a channel) is
that chat (``sender_chat``; :func:`bot.chat.payer.payer_id`): it is checked under the
chat's id, and is never an admin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["AccessLists", "Verdict", "decide"]


class Verdict(StrEnum):
    """What the gate does with an update."""

    ALLOW = "allow"
    IGNORE = "ignore"  # nothing at all: no reply, no record
    REFUSE = "refuse"  # private chat: the "may not use this bot" template, once a day
    LEAVE = "leave"  # a group not enabled: said once, then leaveChat


@dataclass(frozen=True, slots=True)
class AccessLists:
    """What the decision reads: the settings' lists and the runtime entries.

    Attributes:
        allowlist: ``ACCESS_MODE=allowlist``.
        admins: ADMIN_IDS.
        users: ALLOWED_USER_IDS and the users let in at runtime.
        chats: ALLOWED_CHAT_IDS and the groups let in at runtime.
        banned: ids shut out by ``/ban`` (users, groups, channels).
    """

    allowlist: bool
    admins: frozenset[int] = frozenset()
    users: frozenset[int] = frozenset()
    chats: frozenset[int] = frozenset()
    banned: frozenset[int] = field(default_factory=frozenset)


def decide(
    lists: AccessLists,
    *,
    sender_id: int,
    chat_id: int,
    chat_type: str,
    on_behalf_of_chat: bool,
) -> Verdict:
    """The verdict for one message (module docstring).

    Args:
        lists: :class:`AccessLists`.
        sender_id: who writes (a ``sender_chat``'s id for a message on behalf of a chat).
        chat_id: where.
        chat_type: Telegram's ``private``, ``group``, ``supergroup`` or ``channel``.
        on_behalf_of_chat: the message has ``sender_chat`` (or a service sender): never
            an admin.
    """
    if sender_id in lists.banned or chat_id in lists.banned:
        return Verdict.IGNORE
    if not on_behalf_of_chat and sender_id in lists.admins:
        return Verdict.ALLOW
    if chat_type not in ("private", "group", "supergroup"):
        return Verdict.IGNORE
    if not lists.allowlist:
        return Verdict.ALLOW
    if chat_type == "private":
        allowed = sender_id in lists.users or sender_id in lists.chats
        return Verdict.ALLOW if allowed else Verdict.REFUSE
    return Verdict.ALLOW if chat_id in lists.chats else Verdict.LEAVE
