"""The texts of ``/model``: the models a chat may choose, each with its list price per
1,000 tokens (USD, exact as the price card has it), and the answers to a choice
(docs/decisions/161-model-choice-per-chat.md)."""

from __future__ import annotations

from decimal import Decimal

from aiogram.utils.i18n import gettext as _

from bot.chat.model_menu import ModelMenu, ModelOffer

__all__ = ["model_menu_text", "model_set_text", "model_unknown_text"]


def _dollars(value: Decimal) -> str:
    """``Decimal("0.00059")`` → ``$0.00059`` (no exponent, no trailing zeros)."""
    text = f"{value.normalize():f}"
    return f"${text}"


def _price(menu: ModelMenu, offer: ModelOffer) -> str:
    per_1k = menu.per_1k_usd(offer)
    if per_1k is None:
        listed = _("list price unknown")
    else:
        listed = _("{input} in / {output} out per 1k tokens").format(
            input=_dollars(per_1k[0]), output=_dollars(per_1k[1])
        )
    if offer.free:
        return _("free tier (list price {listed})").format(listed=listed)
    return _("paid: {listed}").format(listed=listed)


def model_menu_text(menu: ModelMenu, current: ModelOffer | None, *, stale: bool) -> str:
    """``/model`` without arguments: the current choice and every offered model.

    ``stale``: a model is stored that is not offered any more (shown as automatic)."""
    if current is not None:
        head = _("Model in this chat: {model}.").format(model=current.model)
    elif stale:
        head = _("Model in this chat: automatic (the model chosen before is not offered any more).")
    else:
        head = _("Model in this chat: automatic (free providers first, the paid one last).")
    lines = [head, "", _("Models you can choose:")]
    lines.extend(f"• {o.model} — {_price(menu, o)}" for o in menu.offers)
    lines.append("")
    lines.append(_("Choose one: /model NAME. Back to automatic: /model auto."))
    return "\n".join(lines)


def model_set_text(menu: ModelMenu, chosen: ModelOffer | None) -> str:
    """The chat's model was changed (``None``: back to automatic)."""
    if chosen is None:
        return _("Model set: automatic (free providers first, the paid one last).")
    text = _("Model set: {model} — {price}.").format(model=chosen.model, price=_price(menu, chosen))
    return (
        text
        + " "
        + _(
            "Only providers serving this model answer here; when none of them can, "
            "you get a note instead of an answer from another model."
        )
    )


def model_unknown_text(served: bool) -> str:
    """``/model NAME`` for a model that is not offered: ``served`` when the cascade
    serves it but CHAT_MODELS leaves it out."""
    if served:
        return _(
            "The administrators do not offer that model here. /model lists the ones you can choose."
        )
    return _("Unknown model. /model lists the ones this bot can use.")
