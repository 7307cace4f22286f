"""The OCI runtime (runc or crun) as the linux launcher drives it.

Every call passes `--root <runtime_dir>/<name>` so the runtime's state of our
containers lives beside our checkpoints, and `list` returns only ours.

`find_runtime` picks `--oci_runtime` or the first of crun, runc that really
runs a container here (crun refuses a cgroup v1 hybrid host, for example):
a binary that exists is not enough. The probe runs once per process.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

from mesilla.containerizer.launcher.base import LaunchError

CANDIDATES = ("crun", "runc")

_probed: dict[str, str | None] = {}


class OciRuntimeError(LaunchError):
    """The OCI runtime refused a command; the message has its own words."""


@dataclass(frozen=True)
class OciRuntime:
    binary: str  # absolute path
    root: str  # the runtime's state directory (`--root`)

    @property
    def name(self) -> str:
        return os.path.basename(self.binary)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", self.root, *args]

    async def run(self, *args: str, check: bool = True) -> tuple[int, str]:
        """Runs one runtime command; returns its exit code and stdout."""
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode is not None
        if check and proc.returncode != 0:
            raise OciRuntimeError(
                f"'{self.name} {' '.join(args)}' failed with exit code {proc.returncode}: "
                f"{err.decode(errors='replace').strip()}"
            )
        return proc.returncode, out.decode()

    async def start(self, runtime_id: str) -> None:
        await self.run("start", runtime_id)

    async def kill(self, runtime_id: str, signal: int, *, all_processes: bool = False) -> bool:
        """Signals the container; False when it has no process left to signal."""
        args = ["kill", *(["--all"] if all_processes else []), runtime_id, str(signal)]
        code, _ = await self.run(*args, check=False)
        return code == 0

    async def delete(self, runtime_id: str) -> None:
        """Removes the runtime's container (killing what is left); absent is fine."""
        if await self.state(runtime_id) is None:
            return
        await self.run("delete", "--force", runtime_id)

    async def state(self, runtime_id: str) -> dict[str, Any] | None:
        """The runtime's state of the container (`status`, `pid`, ...), None if unknown."""
        code, out = await self.run("state", runtime_id, check=False)
        return json.loads(out) if code == 0 else None

    async def list(self) -> list[dict[str, Any]]:
        if not os.path.isdir(self.root):
            return []
        _, out = await self.run("list", "--format", "json")
        return json.loads(out) or []


def find_runtime(flags: Any) -> OciRuntime | None:
    """The runtime to use under `flags.runtime_dir`, or None if none works here."""
    wanted = flags.get("oci_runtime") if hasattr(flags, "get") else None
    binary = _probe(wanted) if wanted else next(
        (found for name in CANDIDATES if (found := _probe(name)) is not None), None
    )
    if binary is None:
        return None
    return OciRuntime(binary, os.path.join(flags.runtime_dir, os.path.basename(binary)))


def _probe(name: str) -> str | None:
    """The absolute path of `name` if it runs a trivial container on this host."""
    if name not in _probed:
        binary = shutil.which(name)
        _probed[name] = binary if binary is not None and _runs_a_container(binary) else None
    return _probed[name]


def _runs_a_container(binary: str) -> bool:
    # Imported here: building a host-view bundle needs the oci module, which
    # needs nothing from this one at import time.
    from mesilla.containerizer.launcher import host_rootfs, oci

    if os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory(prefix="mesilla-oci-probe-") as tmp:
        rootfs = os.path.join(tmp, "rootfs")
        os.mkdir(rootfs)
        spec = oci.probe_spec(rootfs, host_rootfs.prepare(rootfs))
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(spec, f)
        probe_id = f"mesilla-probe-{os.getpid()}"
        try:
            result = subprocess.run(
                [binary, "--root", os.path.join(tmp, "state"), "run", "--bundle", tmp, probe_id],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        finally:
            subprocess.run(
                [binary, "--root", os.path.join(tmp, "state"), "delete", "--force", probe_id],
                capture_output=True,
            )
        return result.returncode == 0
