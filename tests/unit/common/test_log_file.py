"""--log_dir: glog's file name for the severity, the handler added and removed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mesilla.common.flags import FlagError
from mesilla.common.log_file import log_file_path, logging_to_file


@pytest.mark.parametrize(
    "level, name",
    [(None, "mesos-master.INFO"), ("INFO", "mesos-master.INFO"), ("warning", "mesos-master.WARNING"),
     ("ERROR", "mesos-master.ERROR"), ("DEBUG", "mesos-master.INFO")],
)  # fmt: skip
def test_the_file_is_named_by_the_logging_level_as_glog(level: str | None, name: str) -> None:
    assert log_file_path("/var/log/mesos", "mesos-master", level) == f"/var/log/mesos/{name}"


def test_the_log_goes_to_the_file_while_the_block_runs(tmp_path: Path) -> None:
    with logging_to_file(str(tmp_path / "logs"), "mesos-agent", "INFO") as path:
        logging.getLogger("mesilla.test").warning("inside")
    logging.getLogger("mesilla.test").warning("after")
    assert path == str(tmp_path / "logs" / "mesos-agent.INFO")
    text = (tmp_path / "logs" / "mesos-agent.INFO").read_text()
    assert "WARNING mesilla.test: inside" in text and "after" not in text


def test_no_log_dir_is_no_file() -> None:
    with logging_to_file(None, "mesos-agent", "INFO") as path:
        assert path is None


def test_a_log_dir_that_cannot_be_made_is_a_flag_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    unusable = str(tmp_path / "file" / "x")
    with pytest.raises(FlagError, match="--log_dir"), logging_to_file(unusable, "m", None):
        pass
