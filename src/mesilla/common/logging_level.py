"""The daemon's glog verbosity toggle, as GET_LOGGING_LEVEL and SET_LOGGING_LEVEL see it.

Mesos's libprocess logging process: SET_LOGGING_LEVEL sets `FLAGS_v` and, when
the level differs from the one the daemon started with, reverts to that level
once `duration` has passed (a later call's duration replaces an earlier one's).
Python logging has no verbosity levels: any level above 0 is DEBUG, 0 is the
root logger's level at the first toggle. Process-wide, as `FLAGS_v` is.
"""

from __future__ import annotations

import asyncio
import logging

from mesilla.v1.mesos import SetLoggingLevelCall


class _Verbosity:
    def __init__(self) -> None:
        self._original: int | None = None  # the root logger's level before the first toggle
        self._revert: asyncio.TimerHandle | None = None

    def level(self) -> int:
        """glog's `FLAGS_v`: 0 unless verbose (debug) logging is on."""
        return 1 if logging.getLogger().getEffectiveLevel() <= logging.DEBUG else 0

    def set(self, level: int, seconds: float) -> None:
        root = logging.getLogger()
        if self._original is None:
            self._original = root.level
        original = self._original
        started_verbose = 1 if original <= logging.DEBUG and original != logging.NOTSET else 0
        root.setLevel(logging.DEBUG if level > 0 else original)
        if (1 if level > 0 else 0) != started_verbose:
            if self._revert is not None:
                self._revert.cancel()
            self._revert = asyncio.get_running_loop().call_later(seconds, root.setLevel, original)


VERBOSITY = _Verbosity()


def set_logging_level(call: SetLoggingLevelCall) -> None:
    """SET_LOGGING_LEVEL: `level` for `duration`, then back to the daemon's own level."""
    VERBOSITY.set(call.level, call.duration.nanoseconds / 1e9)
