"""The prompt fingerprint: a request's identity in the ledger, so its bytes never change."""

from __future__ import annotations

import hashlib

from llm.cascade.types import fingerprint
from llm.types import Message


def test_the_fingerprint_hashes_role_nul_content_u0001_of_every_message_in_utf8() -> None:
    messages = [Message("system", "be brief"), Message("user", "héllo 🙂"), Message("user", "")]
    expected = hashlib.sha256(
        b"system\x00be brief\x01" + "user\x00héllo 🙂\x01".encode() + b"user\x00\x01"
    ).hexdigest()
    assert fingerprint(messages) == expected
    assert fingerprint([]) == hashlib.sha256(b"").hexdigest()
    assert fingerprint(messages[:2]) != fingerprint(messages[1:])
