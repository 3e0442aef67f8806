"""A name someone else chose — a sender's ``first_name``, a channel's or a feed's title —
is quoted in a reply through the one policy for text shown back (``echoed``): a bidi
override, a bell or a NUL in it reaches the chat as ``<U+hex>``, in private and in groups."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.inprocess import InProcessBot
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost

_NAME = "Eve\u202egnp.exe\u0007\u0000"


async def test_start_quotes_the_senders_first_name_without_its_controls(
    app: InProcessBot, fake_telegram: FakeTelegram
) -> None:
    for chat_id, chat_type in ((71, "private"), (-100_555, "supergroup")):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(
            71, "/start", first_name=_NAME, chat_id=chat_id, chat_type=chat_type
        )
        [reply] = await fake_telegram.wait_sent(chat_id, since=mark)
        assert "Eve<U+202E>gnp.exe<U+0007><U+0000>" in reply.text, reply.text
        assert not {"\u202e", "\u0007", "\u0000"} & set(reply.text)


async def test_sub_and_subs_quote_a_channel_title_without_its_controls(
    app: InProcessBot, fake_telegram: FakeTelegram, fake_tme: FakeTme
) -> None:
    fake_tme.add_posts(
        "trickynews",
        [TmePost(post_id=1, date=datetime.now(UTC), text="The council met today.")],
        title="News\u202eswen\u2066",
    )
    replies = []
    for command in ("/digest_off", "/sub @trickynews", "/subs"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(72, command)
        [reply] = await fake_telegram.wait_sent(72, since=mark)
        replies.append(reply.text)
    for text in replies[1:]:
        assert "News<U+202E>swen<U+2066>" in text, text
        assert not {"\u202e", "\u2066"} & set(text)
