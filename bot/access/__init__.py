"""Who may use the bot: the access mode, the runtime allow and ban lists, invites.

* :mod:`bot.access.rules`: the decision, pure (who is asking, where, what the lists say).
* :mod:`bot.access.invites`: invite codes (made, hashed, read from a deep link).
* :mod:`bot.access.store`: the tables (``bot/storage/tables.py``) and the in-memory book
  every update is checked against.

The gate itself is :class:`bot.middlewares.access.AccessGate` (the first middleware an
update meets after the polling barrier's); the admin commands are
:mod:`bot.handlers.admin.access`. Operators read ``docs/access.md``.
"""
