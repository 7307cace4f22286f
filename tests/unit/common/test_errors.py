"""The exception tree that `mesilla.common.errors` draws, and the configuration-error path."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mesilla.common import errors
from mesilla.common.authentication import CredentialsError
from mesilla.common.flags import FlagError
from mesilla.containerizer.isolators import IsolationError
from mesilla.containerizer.launcher import UnknownLauncher
from mesilla.containerizer.launcher.runtime import NoOciRuntime
from mesilla.containerizer.provisioner.errors import (
    ProvisionerError,
    UnsupportedImageProviders,
    UnusableBackend,
)


@pytest.mark.parametrize("cls", [FlagError, CredentialsError, IsolationError, UnknownLauncher])
def test_configuration_errors_are_one_family_and_stay_value_errors(cls: type[Exception]) -> None:
    assert issubclass(cls, errors.ConfigurationError)
    assert issubclass(cls, ValueError)  # callers that caught ValueError still do


@pytest.mark.parametrize("cls", [NoOciRuntime, UnusableBackend, UnsupportedImageProviders])
def test_start_up_errors_of_the_containerizer_are_configuration_errors(cls: type[Exception]) -> None:
    assert issubclass(cls, errors.ConfigurationError)


@pytest.mark.parametrize(
    "cls", [errors.ConfigurationError, errors.HttpError, ProvisionerError, errors.BadRequest]
)
def test_every_family_descends_from_mesilla_error(cls: type[Exception]) -> None:
    assert issubclass(cls, errors.MesillaError)


def test_http_errors_carry_status_reason_and_field() -> None:
    exc = errors.BadRequest("Expecting 'task_id'", field="task_info.task_id")
    assert (exc.status, exc.reason, exc.field, exc.headers) == (
        400, "Expecting 'task_id'", "task_info.task_id", {}
    )
    assert errors.NotFound("x").field is None
    assert str(errors.ServiceUnavailable("no leader")) == "no leader"


@pytest.mark.parametrize(
    ("flag", "names"),
    # The posix launcher: it creates nothing outside --runtime_dir before the isolators load.
    [("--launcher=posix --isolation=bogus", ["bogus", "posix/cpu", "filesystem/linux"]),
     ("--launcher=bogus", ["bogus", "posix", "linux"]),
     ("--launcher=posix --image_providers=bogus", ["bogus", "docker"]),
     ("--launcher=posix --image_providers=docker --image_provisioner_backend=bogus",
      ["bogus", "overlay", "copy", "bind"])],
)
def test_a_daemon_with_a_bad_name_prints_one_line_naming_the_known_ones(
    tmp_path, flag: str, names: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mesilla", "agent", *flag.split(), f"--work_dir={tmp_path}/work",
         f"--runtime_dir={tmp_path}/run", f"--docker_store_dir={tmp_path}/store",
         "--master=127.0.0.1:1", "--port=0"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mesilla agent: ")
    for name in names:
        assert name in lines[0]
