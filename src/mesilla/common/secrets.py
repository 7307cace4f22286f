"""Secrets (mesos.proto `Secret`): resolving them, and keeping their values in memory only.

A `Secret` is `{"type": "VALUE", "value": {"data": <base64>}}` or
`{"type": "REFERENCE", "reference": {"name": ..., "key": ...}}`. As Mesos's
default secret resolver, a VALUE secret resolves to its decoded data and a
REFERENCE one cannot be resolved (Mesilla loads no secret resolver module).

Unlike Mesos, whatever Mesilla writes down or shows (checkpoints, container
configuration files, state endpoints and API responses) goes through
`redact`: the message stays whole but for each secret's `value.data`. What
needs the value (the master's message to the agent, the agent's to its
executor, the containerizer's launch) keeps the message in memory as given.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

# Every secret's value sits under a "secret" key (Environment.Variable, Volume.Source).
_MARK = b'"secret"'


class SecretError(ValueError):
    """A secret that cannot be resolved; the message names it and the fix."""


def resolve(secret: Any, what: str) -> str:
    """The value of `secret` (the JSON of a `Secret`); `what` names it in errors."""
    if not isinstance(secret, dict):
        raise SecretError(f"{what} has no secret: set 'secret' to a Secret of type VALUE")
    if secret.get("type") == "REFERENCE" or "reference" in secret:
        raise SecretError(
            f"{what} refers to a secret, but this agent has no secret resolver to look "
            "references up: give the secret's value (type VALUE) instead"
        )
    value = secret.get("value")
    data = value.get("data") if isinstance(value, dict) else None
    if not isinstance(data, str):
        raise SecretError(f"{what} is a VALUE secret without 'value.data' (base64)")
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise SecretError(f"{what}: the secret's 'value.data' is not valid base64") from None
    try:
        return decoded.decode()
    except UnicodeDecodeError:
        raise SecretError(f"{what}: the secret's value is not UTF-8 text") from None


def redact(data: bytes) -> bytes:
    """The JSON document `data` without any secret's value."""
    if _MARK not in data:
        return data  # the common case: no secret, nothing to decode
    document = msgspec.json.decode(data)
    return msgspec.json.encode(document) if _strip(document) else data


def _strip(node: Any) -> bool:
    """Removes secret values in place; whether there was any."""
    found = False
    if isinstance(node, dict):
        secret = node.get("secret")
        if isinstance(secret, dict) and isinstance(secret.get("value"), dict):
            found = secret["value"].pop("data", None) is not None or found
        for child in node.values():
            found = _strip(child) or found
    elif isinstance(node, list):
        for child in node:
            found = _strip(child) or found
    return found
