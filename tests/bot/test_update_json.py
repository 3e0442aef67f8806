"""The Bot API's JSON read so that no shape of it fails later (``bot/session/update_json.py``):
the bounds exactly, where a fault is named, and the items of a batch found without
decoding it."""

from __future__ import annotations

import json

import pytest

from bot.session.update_json import MAX_DEPTH, UndecodableJson, load_checked, result_items


def _nested(depth: int) -> str:
    """An update whose ``extra`` field makes the whole value ``depth`` levels deep."""
    inner = depth - 1  # the update object is the first level
    return '{"update_id": 3, "extra": ' + "[" * inner + "]" * inner + "}"


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), 0, 2**52, True])
def test_integers_of_64_bits_are_read(value: int) -> None:
    """Signed 64-bit integers (and booleans) pass, whatever their place."""
    text = json.dumps({"update_id": 1, "message": {"chat": {"id": value}, "ids": [value]}})
    assert load_checked(text)["message"]["chat"]["id"] == value


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (2**63, "message.chat.id"),
        (-(2**63) - 1, "message.chat.id"),
        (10**30, "message.chat.id"),
    ],
)
def test_an_integer_beyond_64_bits_is_named_with_its_path(value: int, where: str) -> None:
    """Just past either bound: refused, naming the field, with the update's id."""
    text = json.dumps({"update_id": 7, "message": {"chat": {"id": value}}})
    with pytest.raises(UndecodableJson) as refused:
        load_checked(text)
    assert refused.value.where == f"{where}: an integer beyond 64 bits"
    assert refused.value.update_id == 7


def test_an_integer_beyond_64_bits_in_a_list_and_a_huge_update_id() -> None:
    """A list index is part of the path; a huge update id is no id at all."""
    text = json.dumps({"update_id": 2**64, "message": {"entities": [{"offset": 0}, {"x": 2**64}]}})
    with pytest.raises(UndecodableJson) as refused:
        load_checked(text)
    assert refused.value.update_id is None
    assert "beyond 64 bits" in refused.value.where


def test_nesting_up_to_the_bound_is_read_and_one_more_level_is_not() -> None:
    """MAX_DEPTH levels pass; MAX_DEPTH + 1 are refused, naming the start of the path."""
    assert load_checked(_nested(MAX_DEPTH))["update_id"] == 3
    with pytest.raises(UndecodableJson) as refused:
        load_checked(_nested(MAX_DEPTH + 1))
    assert refused.value.where.startswith("extra.0.0.0…: nested deeper than")
    assert refused.value.update_id == 3


def test_nesting_deeper_than_the_decoder_goes_is_refused_with_the_leading_id() -> None:
    """``json.loads`` raises RecursionError (not a ValueError) there: turned into the
    same refusal, the id read from the text's start."""
    text = _nested(200_000).encode()
    with pytest.raises(UndecodableJson) as refused:
        load_checked(text)
    assert refused.value.where == "nested deeper than the decoder goes"
    assert refused.value.update_id == 3


@pytest.mark.parametrize("text", ["", "{", "[1,]", b"\xff\xfe", "NaNa"])
def test_what_is_not_json_is_refused_as_a_value_error(text: str | bytes) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        load_checked(text)


def test_the_items_of_a_result_are_found_without_decoding_them() -> None:
    """Strings holding brackets, commas and escaped quotes do not cut an item; a deep
    item is one item; other keys before ``result`` are ignored."""
    good = json.dumps({"update_id": 1, "message": {"text": 'a,]} \\" [{ "result": ['}})
    deep = '{"update_id": 2, "message": ' + "[" * 50_000 + "]" * 50_000 + "}"
    text = '{"ok": true, "note": [1, 2], "result": [' + good + ",  " + deep + ', {"update_id": 3}]}'
    items = result_items(text)
    assert items is not None
    assert [items[0], items[2]] == [good, '{"update_id": 3}']
    assert items[1] == deep
    assert result_items('{"ok": true, "result": []}') == []
    assert result_items('{"ok": false, "error_code": 502}') is None
    assert result_items('{"ok": true, "result": [{"update_id": 1}') is None  # cut short


def test_a_lone_surrogate_is_replaced_and_a_pair_kept() -> None:
    """An unpaired ``\\ud800`` escape (in a value, in a key, in text or bytes) becomes
    U+FFFD; a pair written as two escapes is the one code point it spells."""
    raw = '{"a": ["\\ud83d\\ude00 \\ud800"], "\\udfff": "ok", "b": {"c": "\\uDC00x"}}'
    for text in (raw, raw.encode()):
        assert load_checked(text) == {
            "a": ["\U0001f600 \ufffd"],
            "\ufffd": "ok",
            "b": {"c": "\ufffdx"},
        }
    assert load_checked('"\\ud800"') == "\ufffd"
