"""``python -m bot delete-webhook``: remove the token's webhook, deliberately.

A polling process refuses to start while a webhook is set for its token
(:class:`bot.app.lifecycle.WebhookIsSet`): webhook replicas serve it, and deleting it would
take every update from them. Moving a deployment back from webhook replicas to one polling
process is therefore two steps the operator takes on purpose: stop the replicas (each sets
the webhook again when it starts), run this command, then start the polling process.

Pending updates are kept (``drop_pending_updates=False``): the polling process gets them.
Prints one line; exit 0 when the webhook is removed or none was set, 2 when Telegram
refuses ``BOT_TOKEN``, 1 when the Bot API cannot be reached or answers with something
that is not a Telegram response. Only the URL's host is printed, never the token.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import ClientDecodeError, TelegramAPIError, TelegramUnauthorizedError

from bot.ops.logs import redact
from bot.settings import BotApiSettings

__all__ = ["delete_webhook"]


async def delete_webhook(settings: BotApiSettings) -> int:
    """Remove the webhook of ``settings.bot_token`` at ``settings.telegram_api_base``,
    keeping pending updates; print one line (stdout on success, stderr on failure).
    ``settings`` is :class:`bot.settings.BotApiSettings` (``python -m bot delete-webhook``:
    no provider key needed) or the full :class:`bot.settings.Settings`.

    Returns:
        The exit code: 0 removed or none set, 2 token refused, 1 Bot API failure.
    """
    secrets = settings.secret_values()
    api = settings.telegram_api_base
    bot = Bot(
        token=settings.bot_token.get_secret_value(),
        session=AiohttpSession(api=TelegramAPIServer.from_base(api)),
    )
    try:
        info = await bot.get_webhook_info()
        if not info.url:
            print("kopek: no webhook is set for this token: nothing to remove")
            return 0
        await bot.delete_webhook(drop_pending_updates=False)
    except TelegramUnauthorizedError:
        print("kopek: Telegram refused BOT_TOKEN (401 Unauthorized)", file=sys.stderr)
        return 2
    except ClientDecodeError:  # the body may echo the request path, which holds the token
        print(f"kopek: the Bot API at {api} did not answer as Telegram does", file=sys.stderr)
        return 1
    except TelegramAPIError as exc:  # network errors included
        line = " ".join(redact(exc.message, secrets).split())
        print(f"kopek: cannot remove the webhook at {api}: {line}", file=sys.stderr)
        return 1
    finally:
        await bot.session.close()
    host = urlsplit(info.url).hostname or "?"
    print(
        f"kopek: webhook https://{host}/… removed, pending updates kept; a webhook replica "
        "sets it again when it starts, so start polling only once the replicas are stopped"
    )
    return 0
