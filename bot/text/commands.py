"""Every command the bot answers, in one list: ``/help`` and Telegram's command menu
(``setMyCommands``) are both made from :data:`COMMANDS`, and a test checks that every
command a router registers is in it, so neither can drift from the handlers.

A user's ``/help`` lists what that user may use where they ask: ``/buy`` only in a
private chat and when a plan is for sale; an admin (ADMIN_IDS) in a private chat also
gets the admin commands — in English, as every admin reply is (``docs/admin.md`` has
each in full).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiogram.utils.i18n import gettext as _

from bot.text.i18n import N_

__all__ = ["COMMANDS", "Listed", "help_text", "menu_commands"]


@dataclass(frozen=True, slots=True)
class Listed:
    """One command.

    Attributes:
        name: the command without its slash.
        about: what it does: a msgid for a user command, English for an admin one.
        args: its arguments as ``/help`` shows them (literal: names and examples).
        aliases: other names the same handler answers to.
        menu: in Telegram's command menu (a user command).
        admin: only for ADMIN_IDS (shown to them in a private chat).
        private: only in a private chat.
        sales: only when a plan is for sale.
    """

    name: str
    about: str
    args: str = ""
    aliases: tuple[str, ...] = ()
    menu: bool = False
    admin: bool = False
    private: bool = False
    sales: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The name and its aliases."""
        return (self.name, *self.aliases)

    def line(self, about: str) -> str:
        """``/name args — about``."""
        usage = f"/{self.name} {self.args}" if self.args else f"/{self.name}"
        return f"{usage} — {about}"


def _admin(name: str, args: str, about: str) -> Listed:
    return Listed(name, about, args, admin=True)


COMMANDS: tuple[Listed, ...] = (
    Listed("start", N_("Start"), menu=True),
    Listed("help", N_("Help"), menu=True),
    Listed("me", N_("My spend and limits"), menu=True),
    Listed("reset", N_("Forget the conversation"), menu=True),
    Listed("history", N_("What is summarised of this conversation"), menu=True),
    Listed("cost", N_("Show what each answer cost (on/off)"), "[on|off]", menu=True),
    Listed("stop", N_("Stop the answer being written"), menu=True),
    Listed("persona", N_("This chat's persona"), "[NAME | custom TEXT | reset]", menu=True),
    Listed("model", N_("This chat's model and prices"), "[NAME | auto]", menu=True),
    Listed("sub", N_("Subscribe to a channel digest"), "@channel", menu=True),
    Listed("unsub", N_("Unsubscribe from a channel digest"), "@channel"),
    Listed("subs", N_("My subscriptions"), menu=True),
    Listed("digest_time", N_("When my digests come"), "09:00"),
    Listed("digest_off", N_("Pause my digests")),
    Listed("digest_on", N_("Resume my digests")),
    Listed("tz", N_("My timezone"), "Area/City", menu=True),
    Listed("lang", N_("Language"), "[CODE]", aliases=("language",), menu=True),
    Listed("buy", N_("Buy a plan with Telegram Stars"), "[PLAN]", private=True, sales=True),
    Listed("topup", N_("Top up my wallet with Telegram Stars"), "[STARS]", private=True),
    Listed("cancel_renewal", N_("Stop my Stars subscription renewing"), private=True, sales=True),
    Listed("renew", N_("Renew my Stars subscription again"), private=True, sales=True),
    _admin("budget", "[user ID | team NAME | chat ID | plan NAME | chart]", "spend, limits, keys"),
    _admin("limit", "global|team NAME|user ID|chat ID|plan NAME hour|day|month USD|off", "a limit"),
    _admin("team", "NAME add|remove USER_ID | NAME guarantee WINDOW USD | list", "teams"),
    _admin("plan", "USER_ID PLAN|default [until] | list", "a user's plan"),
    _admin("kill", "[hard] [reason]", "the kill switch (/unkill resets it)"),
    _admin("unkill", "", "reset the kill switch"),
    _admin("allow", "USER_ID | @username | GROUP_ID", "let a user in, or enable a group"),
    _admin("deny", "USER_ID | GROUP_ID", "take back a runtime allow"),
    _admin("ban", "ID [reason]", "shut an id out"),
    _admin("unban", "ID", "let a banned id back"),
    _admin("access", "", "the mode, allowed ids, bans, invites"),
    _admin("invite", "[uses] [plan] [ttl]", "an invite link"),
    _admin("refund", "[charge id]", "refund a Stars payment; alone: the latest payments"),
    _admin("providers", "[prices | enable NAME]", "keys, circuits, prices"),
    _admin("reconcile", "[PROVIDER] [period]", "as the caption of a provider's usage export"),
    _admin("digest_now", "[USER_ID]", "a digest now"),
    _admin("alerts", "[mute | unmute TYPE]", "the alert types, told or muted"),
    _admin("drill", "", "check the ledger's guards on the live bot, at no cost"),
    _admin("dashboard", "", "the operator dashboard"),
)


def menu_commands() -> list[tuple[str, str]]:
    """Telegram's command menu: ``(command, description)`` in the current locale."""
    return [(c.name, _(c.about)) for c in COMMANDS if c.menu]


def help_text(*, admin: bool, private: bool, selling: bool) -> str:
    """``/help`` for one user: the commands they may use here (module docstring).

    Args:
        admin: the sender is in ADMIN_IDS (and the message is not on behalf of a chat).
        private: asked in a private chat.
        selling: some plan is for sale in Telegram Stars.
    """
    lines = [_("Just write to chat with the model."), ""]
    for listed in COMMANDS:
        if listed.admin or (listed.private and not private) or (listed.sales and not selling):
            continue
        lines.append(listed.line(_(listed.about)))
    if admin and private:
        lines += ["", "Admin commands:"]
        lines += [c.line(c.about) for c in COMMANDS if c.admin]
    return "\n".join(lines)
