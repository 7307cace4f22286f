"""`--log_dir`: the daemon's log in a file as well as on stderr, as glog writes it for Mesos.

Mesos (`src/logging/logging.cpp`) logs to ``<log_dir>/<program>.<SEVERITY>``,
the severity being the one of ``--logging_level`` (INFO, WARNING or ERROR), and
serves that file as ``/master/log`` or ``/slave/log`` (the web UI's LOG link,
`mesilla.common.attached_files`). Mesilla writes the same name, appending across
restarts; a directory it cannot create stops the daemon at start, as Mesos's
"Could not initialize logging".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from mesilla.common.flags import Flag, FlagError

#: The format of every line Mesilla logs, on stderr and in the file.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

FLAG = Flag(
    "log_dir",
    "Also write the log to <log_dir>/mesos-<daemon>.<SEVERITY> and serve it under /files "
    "(default: stderr only).",
    kind="path",
)


def log_file_path(log_dir: str, program: str, logging_level: str | None) -> str:
    """glog's file for the severity of `--logging_level` (DEBUG, which glog lacks, is INFO's)."""
    severity = (logging_level or "INFO").upper()
    if severity not in ("WARNING", "ERROR"):
        severity = "INFO"
    return os.path.join(log_dir, f"{program}.{severity}")


@contextmanager
def logging_to_file(
    log_dir: str | None, program: str, logging_level: str | None
) -> Iterator[str | None]:
    """While the block runs, the process's log also goes to the file (its path is yielded;
    None without `log_dir`)."""
    if not log_dir:
        yield None
        return
    path = log_file_path(os.path.abspath(log_dir), program, logging_level)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        raise FlagError(f"Could not initialize logging in --log_dir={log_dir}: {exc}") from None
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()
