"""A body that does not validate is a BadRequest naming the field, with msgspec's error as its cause."""

from __future__ import annotations

import msgspec
import pytest

from mesilla.common.errors import BadRequest
from mesilla.v1 import codec, scheduler


def test_the_field_at_fault_is_named() -> None:
    body = b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": 7, "name": "f"}}}'
    with pytest.raises(BadRequest) as raised:
        codec.decode(body, scheduler.Call)
    assert raised.value.field == "subscribe.framework_info.user"
    assert "Failed to validate Call" in raised.value.reason
    assert isinstance(raised.value.__cause__, msgspec.ValidationError)


def test_a_body_that_is_not_json_names_no_field() -> None:
    with pytest.raises(BadRequest, match="Failed to parse body into JSON") as raised:
        codec.decode(b"{not json", scheduler.Call)
    assert raised.value.field is None
    assert isinstance(raised.value.__cause__, msgspec.DecodeError)
