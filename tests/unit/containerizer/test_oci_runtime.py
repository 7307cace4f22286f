"""What the linux launcher reads of the OCI runtime's state directory without running it,
and how it runs the runtime's commands."""

from __future__ import annotations

import sys
from pathlib import Path

from mesilla.containerizer.launcher.runtime import OciRuntime, communicate


def test_ids_are_the_runtimes_container_directories(tmp_path: Path) -> None:
    root = tmp_path / "runc"
    for rid in ("exec-1", "exec-1.task-a"):
        (root / rid).mkdir(parents=True)
        (root / rid / "state.json").write_text("{}")
    (root / "a-file").write_text("")  # not a container
    (root / "a-link").symlink_to(root / "exec-1")  # neither
    runtime = OciRuntime("/usr/bin/runc", str(root))
    assert sorted(runtime.ids()) == ["exec-1", "exec-1.task-a"]
    assert all(runtime.knows(rid) for rid in runtime.ids())


def test_no_state_directory_is_no_container(tmp_path: Path) -> None:
    assert OciRuntime("/usr/bin/runc", str(tmp_path / "absent")).ids() == []


async def test_a_command_that_fills_its_pipes_is_read_to_its_end() -> None:
    # More than a pipe holds on each stream: read while it runs, or it would never end.
    script = "import sys; sys.stdout.write('o' * 200000); sys.stderr.write('e' * 200000); sys.exit(3)"
    code, out, err = await communicate([sys.executable, "-c", script])
    assert (code, out, err) == (3, b"o" * 200000, b"e" * 200000)
