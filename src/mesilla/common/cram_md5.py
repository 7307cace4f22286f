"""CRAM-MD5 (RFC 2195), the SASL mechanism Mesos authenticates v0 frameworks with: the server side.

The server sends a challenge of the form ``<random.timestamp@hostname>``; the
client answers ``<principal> <hex HMAC-MD5 of the challenge, keyed by its
secret>``, which proves it knows the secret without sending it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import time
from collections.abc import Mapping

MECHANISM = "CRAM-MD5"


class CramMD5Server:
    """One exchange: `challenge`, then `verify` of the client's response."""

    def __init__(self, credentials: Mapping[str, str], hostname: str | None = None) -> None:
        self._credentials = credentials
        nonce = secrets.randbelow(2**63)
        self.challenge = f"<{nonce}.{int(time.time())}@{hostname or socket.gethostname()}>".encode()

    def verify(self, response: bytes) -> str | None:
        """The principal `response` proves, None if it proves none."""
        principal, space, digest = response.decode("utf-8", "replace").rpartition(" ")
        if not space:
            return None
        secret = self._credentials.get(principal)
        # Computed for an unknown principal too, so that timing tells nothing.
        key = (secret if secret is not None else secrets.token_hex(16)).encode()
        expected = hmac.new(key, self.challenge, hashlib.md5).hexdigest()
        if secret is None or not hmac.compare_digest(expected, digest.lower()):
            return None
        return principal
