"""disk/du measuring real sandboxes, and reporting a disk filler over its quota."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS
from mesilla.containerizer.isolators.disk.du import DiskDuIsolator
from mesilla.containerizer.types import ContainerConfig
from mesilla.v1.mesos import (
    CommandInfo,
    ContainerID,
    Reason,
    Resource,
    Scalar,
    ValueType,
)


def disk(megabytes: float) -> Resource:
    return Resource(name="disk", type=ValueType.SCALAR, scalar=Scalar(value=megabytes))


def flags(*extra: str) -> Any:
    return parse(
        CONTAINERIZER_FLAGS,
        ["--container_disk_watch_interval=50ms", *extra],
        environ={},
    )


FILLER = (
    "i=0; while :; do head -c 1048576 /dev/urandom > f$i; i=$((i+1)); sleep 0.05; done"
)


@pytest.fixture
def filled_sandbox(tmp_path: Path) -> Iterator[Path]:
    """A sandbox with a process that keeps writing into it, stopped at teardown."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    filler = subprocess.Popen(["sh", "-c", FILLER], cwd=sandbox)
    try:
        yield sandbox
    finally:
        filler.kill()
        filler.wait()


async def test_disk_filler_over_quota_is_reported(filled_sandbox):
    isolator = DiskDuIsolator(flags("--enforce_container_disk_quota"))
    cid = ContainerID(value=str(uuid.uuid4()))
    config = ContainerConfig(
        command=CommandInfo(value="x"), sandbox=str(filled_sandbox), resources=[disk(2)]
    )
    try:
        await isolator.prepare(cid, config)
        watch = asyncio.create_task(isolator.watch(cid))
        limitation = await asyncio.wait_for(watch, 60)
        assert limitation.reason == Reason.REASON_CONTAINER_LIMITATION_DISK
        assert limitation.message.startswith("Disk usage (")
        assert limitation.message.endswith("exceeds quota (2048KB)")
        assert [(r.name, r.scalar.value) for r in limitation.resources] == [
            ("disk", 2.0)
        ]
        usage = await isolator.usage(cid)
        assert usage["disk_limit_bytes"] == 2 << 20
        assert usage["disk_used_bytes"] > 2 << 20
    finally:
        await isolator.cleanup(cid)


async def test_without_enforcement_usage_is_reported_but_not_limited(tmp_path):
    isolator = DiskDuIsolator(flags())
    cid = ContainerID(value=str(uuid.uuid4()))
    (tmp_path / "data").write_bytes(b"x" * (3 << 20))
    config = ContainerConfig(
        command=CommandInfo(value="x"), sandbox=str(tmp_path), resources=[disk(1)]
    )
    try:
        await isolator.prepare(cid, config)
        watch = asyncio.create_task(isolator.watch(cid))

        async def measured() -> dict[str, Any]:
            while "disk_used_bytes" not in (usage := await isolator.usage(cid)):
                await asyncio.sleep(0.05)
            return usage

        usage = await asyncio.wait_for(measured(), 60)
        assert usage["disk_used_bytes"] >= 3 << 20
        assert usage["disk_limit_bytes"] == 1 << 20
        await asyncio.sleep(0.2)  # several more measurements, all over quota
        assert not watch.done()
        watch.cancel()
    finally:
        await isolator.cleanup(cid)


async def test_update_changes_the_quota_and_nested_containers_are_not_measured(
    tmp_path,
):
    isolator = DiskDuIsolator(flags("--enforce_container_disk_quota"))
    parent = ContainerID(value=str(uuid.uuid4()))
    nested = ContainerID(value=str(uuid.uuid4()), parent=parent)
    config = ContainerConfig(
        command=CommandInfo(value="x"), sandbox=str(tmp_path), resources=[disk(10)]
    )
    try:
        await isolator.prepare(parent, config)
        await isolator.prepare(nested, config)
        assert await isolator.usage(nested) == {}
        await isolator.update(parent, [disk(20)], {})
        assert (await isolator.usage(parent))["disk_limit_bytes"] == 20 << 20
    finally:
        await isolator.cleanup(nested)
        await isolator.cleanup(parent)
