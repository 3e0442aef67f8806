"""Telegram Mini App launch data, signed as Telegram documents it ("Validating data
received via the Mini App", core.telegram.org/bots/webapps), for tests that play the
Telegram client opening the operator dashboard.

The steps, written out rather than borrowed from the code under test: the
data-check-string is every field but ``hash`` as ``key=value``, sorted by key, joined by
a line feed; the secret key is HMAC-SHA-256 of the bot token under the key
``WebAppData``; ``hash`` is the hex HMAC-SHA-256 of the data-check-string under it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from urllib.parse import quote, urlencode

__all__ = ["documented_hash", "launch_fields", "launch_url", "signed_init_data"]


def documented_hash(fields: dict[str, str], token: str) -> str:
    """The ``hash`` Telegram puts beside ``fields`` for the bot ``token``."""
    data_check_string = "\n".join(f"{k}={v}" for k, v in sorted(fields.items()))
    secret_key = hmac.new(b"WebAppData", token.encode(), hashlib.sha256).digest()
    return hmac.new(secret_key, data_check_string.encode(), hashlib.sha256).hexdigest()


def launch_fields(
    user_id: int, auth_date: datetime, token: str, *, is_bot: bool | None = None
) -> dict[str, str]:
    """The fields of one launch for ``user_id`` at ``auth_date``, ``hash`` included."""
    user: dict[str, object] = {"id": user_id, "first_name": "Ada", "language_code": "en"}
    if is_bot is not None:
        user["is_bot"] = is_bot
    fields = {
        "query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
        "user": json.dumps(user, separators=(",", ":")),
        "auth_date": str(int(auth_date.timestamp())),
        "signature": "c2lnbmF0dXJlIG9mIGEgdGhpcmQgcGFydHk",
    }
    fields["hash"] = documented_hash(fields, token)
    return fields


def signed_init_data(user_id: int, auth_date: datetime, token: str) -> str:
    """``Telegram.WebApp.initData`` as the page receives it (URL-encoded)."""
    return urlencode(launch_fields(user_id, auth_date, token), quote_via=quote)


def launch_url(page: str, init_data: str) -> str:
    """``page`` opened as a Telegram client opens a Mini App: the launch parameters in
    the fragment (``tgWebAppData`` holds the URL-encoded ``initData``)."""
    fragment = urlencode(
        {"tgWebAppData": init_data, "tgWebAppVersion": "8.0", "tgWebAppPlatform": "tdesktop"},
        quote_via=quote,
    )
    return f"{page}#{fragment}"
