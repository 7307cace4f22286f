"""The launcher and isolator registries and Mesos's `--isolation` rules."""

from __future__ import annotations

import pytest

from mesilla.containerizer.isolators import (
    ISOLATORS,
    MESOS_ORDER,
    IsolationError,
    load_isolators,
    resolve_isolation,
)
from mesilla.containerizer.launcher import UnknownLauncher, load_launcher
from mesilla.containerizer.launcher.posix import PosixLauncher


def test_filesystem_posix_and_environment_secret_are_added_and_order_is_mesos_order() -> None:
    assert resolve_isolation("posix/mem,posix/cpu") == [
        "filesystem/posix",
        "posix/cpu",
        "posix/mem",
        "environment_secret",
    ]
    assert resolve_isolation("") == ["filesystem/posix", "environment_secret"]


def test_every_registered_isolator_has_a_place_in_mesos_order() -> None:
    assert set(ISOLATORS) <= set(MESOS_ORDER)
    names = resolve_isolation(",".join(n for n in ISOLATORS if n != "filesystem/linux"))
    assert names == sorted(names, key=MESOS_ORDER.index)


def test_deprecated_aliases_and_duplicates() -> None:
    assert resolve_isolation("process,posix/cpu") == [
        "filesystem/posix", "posix/cpu", "posix/mem", "environment_secret",
    ]  # fmt: skip


def test_only_one_filesystem_isolator() -> None:
    if "filesystem/linux" not in ISOLATORS:
        pytest.skip("filesystem/linux is not registered in this build")
    with pytest.raises(IsolationError, match="Only one filesystem isolator"):
        resolve_isolation("filesystem/posix,filesystem/linux")


def test_filesystem_linux_brings_the_volume_isolators() -> None:
    if "filesystem/linux" not in ISOLATORS:
        pytest.skip("filesystem/linux is not registered in this build")
    names = resolve_isolation("filesystem/linux")
    implied = {"volume/host_path", "volume/sandbox_path"} & set(ISOLATORS)
    assert implied <= set(names)
    assert "filesystem/posix" not in names


def test_unknown_isolator_lists_the_known_ones() -> None:
    with pytest.raises(IsolationError) as raised:
        resolve_isolation("posix/cpu,cgroups/bogus")
    assert "cgroups/bogus" in str(raised.value)
    assert "posix/mem" in str(raised.value)


async def test_load_isolators_constructs_them_in_order() -> None:
    isolators = await load_isolators(["posix/mem", "posix/cpu"], flags=None)
    assert [i.name for i in isolators] == [
        "filesystem/posix", "posix/cpu", "posix/mem", "environment_secret",
    ]  # fmt: skip


def test_launcher_registry() -> None:
    assert load_launcher("posix") is PosixLauncher
    with pytest.raises(UnknownLauncher, match="use one of linux, posix"):
        load_launcher("windows")
