"""RecordIO framing of Mesos streams: ``<decimal length>\\n<record>`` (docs/recordio.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from mesilla.common.errors import BadRequest

# A record longer than this is a protocol error, not something to buffer.
MAX_RECORD_SIZE = 64 * 1024 * 1024


def encode(record: bytes) -> bytes:
    return b"%d\n%s" % (len(record), record)


class Decoder:
    """Incremental decoder: feed bytes, get the complete records so far."""

    def __init__(self, max_record_size: int = MAX_RECORD_SIZE) -> None:
        self._buffer = bytearray()
        self._length: int | None = None
        self._max = max_record_size

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        records = []
        while True:
            if self._length is None:
                newline = self._buffer.find(b"\n")
                if newline < 0:
                    if len(self._buffer) > 20:
                        raise BadRequest("RecordIO: record length header is too long")
                    break
                header = bytes(self._buffer[:newline]).strip()
                if not header.isdigit():
                    raise BadRequest(f"RecordIO: invalid record length {header[:20]!r}")
                self._length = int(header)
                if self._length > self._max:
                    raise BadRequest(f"RecordIO: record of {self._length} bytes is too large")
                del self._buffer[: newline + 1]
            if len(self._buffer) < self._length:
                break
            records.append(bytes(self._buffer[: self._length]))
            del self._buffer[: self._length]
            self._length = None
        return records

    @property
    def pending(self) -> bool:
        """True if a partial record is buffered (the stream ended mid-record)."""
        return bool(self._buffer) or self._length is not None


async def records(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    decoder = Decoder()
    async for chunk in chunks:
        for record in decoder.feed(chunk):
            yield record
