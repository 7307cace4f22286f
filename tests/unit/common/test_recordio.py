import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesilla.common import recordio
from mesilla.common.errors import BadRequest


@given(st.lists(st.binary(max_size=200), max_size=10), st.integers(min_value=1, max_value=17))
def test_records_survive_any_chunking(records: list[bytes], chunk: int) -> None:
    stream = b"".join(recordio.encode(r) for r in records)
    decoder = recordio.Decoder()
    out: list[bytes] = []
    for i in range(0, len(stream), chunk):
        out += decoder.feed(stream[i : i + chunk])
    assert out == records
    assert not decoder.pending


@pytest.mark.parametrize("bad", [b"abc\n", b"-1\n", b"9" * 30])
def test_malformed_headers_are_bad_requests(bad: bytes) -> None:
    with pytest.raises(BadRequest):
        recordio.Decoder().feed(bad)


def test_oversized_record_is_refused_before_buffering() -> None:
    with pytest.raises(BadRequest):
        recordio.Decoder(max_record_size=10).feed(b"11\n")
