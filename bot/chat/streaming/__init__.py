"""Showing an answer while it streams, and stopping it.

Read in this order:

* :mod:`~bot.chat.streaming.session` — one answer's stream from the handler's side
  (:class:`StreamSession`: its control for the cascade, its display, its registry
  entry) and how answers stream (:class:`StreamConfig`, from ``STREAM_MODE_PRIVATE`` /
  ``STREAM_MODE_GROUP`` and the two intervals);
* :mod:`~bot.chat.streaming.displays` — the two displays: **draft** (private chats,
  ``sendMessageDraft`` with ``can_stop``) and **edit** (groups and topics, a message
  with an inline Stop button edited in place, then turned into the final answer);
* :mod:`~bot.chat.streaming.pacing` — at most one draft/edit per chat per interval,
  across every answer streaming into that chat (:class:`EditPacer`), and the display
  loop that takes its turns (:class:`PacedDisplay`: flood waits pause it, a chat that
  refuses the bot stops the stream, any other refusal ends the display only);
* :mod:`~bot.chat.streaming.registry` — every answer streaming now, and the three ways
  to stop one (the draft's Stop, the inline button, ``/stop``: the sender or an admin
  only), plus ``/kill hard`` and a shutdown past its grace, which stop them all;
* :mod:`~bot.chat.streaming.metrics` — the Prometheus figures.

All time is the injected clock's (``docs/decisions/020-clock-rule.md``): the pacing
interval and the wait for stopped streams to settle are waited with ``Clock.sleep``
and measured with ``Clock.monotonic``, as every other pace of the bot is.
"""
