"""CRAM-MD5's server side, against RFC 2195's own example."""

from __future__ import annotations

import hashlib
import hmac

from mesilla.common.cram_md5 import CramMD5Server

CHALLENGE = b"<1896.697170952@postoffice.reston.mci.net>"
CREDENTIALS = {"tim": "tanstaaftanstaaf", "two words": "secret"}


def server() -> CramMD5Server:
    found = CramMD5Server(CREDENTIALS, hostname="postoffice.reston.mci.net")
    found.challenge = CHALLENGE  # the RFC's, in place of a random one
    return found


def test_the_rfc_example_proves_its_principal() -> None:
    assert server().verify(b"tim b913a602c7eda7a495b4e6e7334d3890") == "tim"


def test_a_principal_may_hold_a_space() -> None:
    digest = hmac.new(b"secret", CHALLENGE, hashlib.md5).hexdigest()
    assert server().verify(f"two words {digest}".encode()) == "two words"


def test_wrong_digest_unknown_principal_or_no_space_prove_nothing() -> None:
    assert server().verify(b"tim b913a602c7eda7a495b4e6e7334d3891") is None
    assert server().verify(b"tom b913a602c7eda7a495b4e6e7334d3890") is None
    assert server().verify(b"timb913a602c7eda7a495b4e6e7334d3890") is None
    assert server().verify(b"\xff\xfe garbage") is None


def test_each_challenge_is_new_and_names_the_host() -> None:
    first, second = CramMD5Server(CREDENTIALS, "host.example"), CramMD5Server(CREDENTIALS, "host.example")
    assert first.challenge != second.challenge
    assert first.challenge.startswith(b"<") and first.challenge.endswith(b"@host.example>")
