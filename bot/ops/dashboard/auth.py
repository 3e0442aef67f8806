"""Who may read the dashboard's API: Telegram's Mini App launch data, checked as Telegram
documents it ("Validating data received via the Mini App", core.telegram.org/bots/webapps).

The page sends ``Telegram.WebApp.initData`` — a query string Telegram signs with the
bot's token — with every request (``Authorization: tma <initData>``). It is valid when

* its ``hash`` is the hex HMAC-SHA-256 of the *data-check-string* (every other field as
  ``key=value``, sorted by key, joined by ``\\n``) under the secret key
  HMAC-SHA-256(key=``WebAppData``, msg=bot token) — aiogram's
  :func:`aiogram.utils.web_app.safe_parse_webapp_init_data` does exactly this, and is used;
* its ``auth_date`` (when Telegram opened the Mini App) is at most
  ``DASHBOARD_AUTH_MAX_AGE_SECONDS`` old (and at most :data:`FUTURE_SKEW_S` ahead of the
  bot's clock);
* its ``user`` is a person (not a bot) in ``ADMIN_IDS``.

Before aiogram sees it, the text is bounded (:data:`MAX_INIT_DATA_CHARS`, ASCII, a
well-formed query string of at most :data:`MAX_FIELDS` fields, each key once) and the
``hash`` must be 64 lowercase hex digits: aiogram compares with
:func:`hmac.compare_digest`, which raises ``TypeError`` on a non-ASCII ``str``, and takes
the last of repeated keys. Anything else is refused the same way, without saying why.

The confirmation tokens of the kill-switch controls (:class:`Confirmations`) are
HMACs under a second key derived from the bot token, so every replica checks the token
another replica issued, and nothing is kept between the two requests.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

from aiogram.utils.web_app import safe_parse_webapp_init_data
from pydantic import SecretStr

from budget.kernel.clock import Clock

__all__ = [
    "FUTURE_SKEW_S",
    "MAX_FIELDS",
    "MAX_INIT_DATA_CHARS",
    "Admin",
    "Confirmations",
    "InitDataCheck",
]

#: The longest ``initData`` read (characters). Telegram's is a few hundred: ``user``
#: (JSON with names and a photo URL), ``auth_date``, ``hash``, ``signature``, a query or
#: chat id; a longer one is not Telegram's.
MAX_INIT_DATA_CHARS = 4096
#: The most fields read from one ``initData``.
MAX_FIELDS = 32
#: Seconds an ``auth_date`` may be ahead of the bot's clock (the two clocks' drift).
FUTURE_SKEW_S = 60
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Admin:
    """An admin the launch data proved.

    Attributes:
        user_id: their Telegram user id (in ``ADMIN_IDS``).
        auth_date: when Telegram opened the Mini App for them (aware UTC).
    """

    user_id: int
    auth_date: datetime


class InitDataCheck:
    """Checks ``initData`` against the bot token, the clock and ``ADMIN_IDS``.

    Args:
        token: the bot token (the key Telegram signs with); never shown by ``repr``.
        admin_ids: who may pass.
        clock: the bot's clock (``now()``).
        max_age_s: ``DASHBOARD_AUTH_MAX_AGE_SECONDS``.
    """

    __slots__ = ("_admin_ids", "_clock", "_max_age", "_token")

    def __init__(
        self, token: SecretStr, admin_ids: frozenset[int], clock: Clock, max_age_s: float
    ) -> None:
        self._token = token
        self._admin_ids = admin_ids
        self._clock = clock
        self._max_age = timedelta(seconds=max_age_s)

    def __repr__(self) -> str:
        return f"InitDataCheck(admins={len(self._admin_ids)}, max_age={self._max_age})"

    def admin(self, init_data: str | None) -> Admin | None:
        """The admin ``init_data`` proves, or ``None`` for anything else: missing,
        malformed, forged, tampered, too old, from the future, a bot, not an admin."""
        if not init_data or not _well_formed(init_data):
            return None
        try:
            parsed = safe_parse_webapp_init_data(self._token.get_secret_value(), init_data)
        except (ValueError, TypeError, RecursionError):  # pydantic's errors are ValueErrors
            return None
        auth_date = parsed.auth_date
        if auth_date.tzinfo is None:  # pydantic reads a Unix time as aware UTC; be sure
            auth_date = auth_date.replace(tzinfo=UTC)
        age = self._clock.now() - auth_date
        if age > self._max_age or age < -timedelta(seconds=FUTURE_SKEW_S):
            return None
        user = parsed.user
        if user is None or user.is_bot or user.id not in self._admin_ids:
            return None
        return Admin(user.id, auth_date)


def _well_formed(init_data: str) -> bool:
    """A bounded ASCII query string with each key once and a hash of 64 hex digits."""
    if len(init_data) > MAX_INIT_DATA_CHARS or not init_data.isascii():
        return False
    try:
        fields = parse_qsl(init_data, strict_parsing=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        return False
    keys = [key for key, _value in fields]
    if len(set(keys)) != len(keys):
        return False
    digest = dict(fields).get("hash")
    return digest is not None and _HASH.fullmatch(digest) is not None


class Confirmations:
    """The second step of a dashboard control: a token bound to one admin, one action and
    its argument, valid for ``ttl_s`` seconds, checked by any replica.

    A token is ``<issued unix seconds>.<hex HMAC-SHA-256>`` of
    ``admin\\naction\\nissued\\nargument`` under HMAC-SHA-256(key=``KopekDashboardConfirm``,
    msg=bot token): nothing secret in it, nothing to store.

    Args:
        token: the bot token.
        clock: the bot's clock.
        ttl_s: seconds a token stays valid.
    """

    __slots__ = ("_clock", "_key", "_ttl_s")

    def __init__(self, token: SecretStr, clock: Clock, ttl_s: int = 60) -> None:
        secret = token.get_secret_value().encode()
        self._key = hmac.new(b"KopekDashboardConfirm", secret, hashlib.sha256).digest()
        self._clock = clock
        self._ttl_s = ttl_s

    def __repr__(self) -> str:
        return f"Confirmations(ttl_s={self._ttl_s})"

    def _sign(self, admin_id: int, action: str, issued: int, argument: str) -> str:
        msg = f"{admin_id}\n{action}\n{issued}\n{argument}".encode()
        return hmac.new(self._key, msg, hashlib.sha256).hexdigest()

    def issue(self, admin_id: int, action: str, argument: str = "") -> str:
        """A token for ``action`` (``kill``, ``unkill``) with ``argument`` (the reason)."""
        issued = int(self._clock.now().timestamp())
        return f"{issued}.{self._sign(admin_id, action, issued, argument)}"

    def check(self, token: str, admin_id: int, action: str, argument: str = "") -> bool:
        """True when ``token`` was issued for exactly this admin, action and argument,
        at most ``ttl_s`` seconds ago."""
        issued_text, _, signature = token.partition(".")
        ascii_time = issued_text.isascii() and issued_text.isdigit()
        if not ascii_time or len(issued_text) > 12 or not _HASH.fullmatch(signature):
            return False
        issued = int(issued_text)
        age = self._clock.now().timestamp() - issued
        if not -FUTURE_SKEW_S <= age <= self._ttl_s:
            return False
        expected = self._sign(admin_id, action, issued, argument)
        return hmac.compare_digest(expected, signature)
