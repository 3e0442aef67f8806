"""The open price questions (bot/chat/confirm.py): bounded, taken once, by their sender
only, in their chat, within the deadline."""

from __future__ import annotations

from bot.chat.confirm import MAX_PER_USER, Confirmations, Taken
from tests.support.clocks import ManualClock


async def _nothing() -> None:
    return None


def test_a_question_is_taken_once_by_its_sender_in_its_chat() -> None:
    clock = ManualClock()
    questions = Confirmations(clock, ttl_s=60)
    token = questions.ask(1, 10, _nothing)
    assert len(token) >= 21, "16 random bytes, URL-safe"
    assert questions.take(token, 2, 10) == (Taken.NOT_YOURS, None)
    assert questions.take(token, 1, 11) == (Taken.GONE, None), "another chat: a replay"
    result, pending = questions.take(token, 1, 10)
    assert result is Taken.GO and pending is not None and pending.user_id == 1
    assert questions.take(token, 1, 10) == (Taken.GONE, None), "once"
    assert questions.take("guess", 1, 10) == (Taken.GONE, None)


def test_a_question_expires_and_cancel_is_the_senders() -> None:
    clock = ManualClock()
    questions = Confirmations(clock, ttl_s=60)
    token = questions.ask(1, 10, _nothing)
    assert questions.cancel(token, 2, 10) is Taken.NOT_YOURS
    clock.advance(61)
    assert questions.take(token, 1, 10) == (Taken.EXPIRED, None)
    assert len(questions) == 0
    token = questions.ask(1, 10, _nothing)
    assert questions.cancel(token, 1, 10) is Taken.GO
    assert questions.take(token, 1, 10) == (Taken.GONE, None)


def test_a_user_keeps_at_most_a_few_questions_open() -> None:
    questions = Confirmations(ManualClock(), ttl_s=60)
    tokens = [questions.ask(1, 10, _nothing) for _ in range(MAX_PER_USER + 2)]
    assert len(questions) == MAX_PER_USER
    assert questions.take(tokens[0], 1, 10) == (Taken.GONE, None), "the oldest dropped"
    assert questions.take(tokens[-1], 1, 10)[0] is Taken.GO
