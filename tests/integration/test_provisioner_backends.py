"""The provisioner end to end with each rootfs backend: real mounts, real files,
the rootfs checked from inside with chroot + busybox."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mesilla.common.flags import parse
from mesilla.containerizer.flags import CONTAINERIZER_FLAGS, ContainerizerFlags
from mesilla.containerizer.provisioner.backends import choose_backend
from mesilla.containerizer.provisioner.backends._mount import mount_points_under
from mesilla.containerizer.provisioner.errors import BackendError
from mesilla.containerizer.provisioner.provisioner import Provisioner
from mesilla.testing.images import build_image, write_docker_save
from mesilla.v1.mesos import ContainerID, Image, ImageDocker

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("no_leftover_mounts")]


def docker_image(name: str) -> Image:
    return Image(type="DOCKER", docker=ImageDocker(name=name))


def provisioner_flags(tmp_path: Path, backend: str | None) -> ContainerizerFlags:
    argv = [
        "--image_providers=docker",
        f"--docker_store_dir={tmp_path / 'store' / 'docker'}",
        f"--docker_registry={tmp_path / 'images'}",
    ]
    if backend:
        argv.append(f"--image_provisioner_backend={backend}")
    return ContainerizerFlags.of(parse(CONTAINERIZER_FLAGS, argv, environ={}))


@pytest.fixture
def images(tmp_path: Path) -> Path:
    directory = tmp_path / "images"
    directory.mkdir()
    write_docker_save(
        build_image(with_whiteouts=True),
        str(directory / "layered:latest.tar"),
        ["layered:latest"],
    )
    write_docker_save(
        build_image(), str(directory / "single:latest.tar"), ["single:latest"]
    )
    other = build_image(extra_files={"etc/other": b"other\n"})
    write_docker_save(other, str(directory / "other:latest.tar"), ["other:latest"])
    repeated = build_image(with_whiteouts=True)
    repeated.layers.append(repeated.layers[0])  # base, whiteouts, base again
    repeated.config["rootfs"]["diff_ids"].append(repeated.layers[0].diff_id)
    write_docker_save(
        repeated, str(directory / "repeated:latest.tar"), ["repeated:latest"]
    )
    return directory


async def make_provisioner(tmp_path: Path, backend: str | None) -> Provisioner:
    return await Provisioner.create(provisioner_flags(tmp_path, backend))


def rootfses_dir(tmp_path: Path, container: str, backend: str) -> Path:
    """Where the provisioner puts a container's rootfses made by `backend`."""
    store = tmp_path / "store" / "provisioner" / "containers"
    return store / container / "backends" / backend / "rootfses"


@pytest.fixture
async def destroy_after(
    tmp_path: Path,
) -> AsyncIterator[list[tuple[Provisioner, ContainerID]]]:
    """Containers a test provisioned, destroyed afterwards even when it fails."""
    created: list[tuple[Provisioner, ContainerID]] = []
    yield created
    for provisioner, container_id in created:
        await provisioner.destroy(container_id)
        await provisioner.close()


async def provisioner_for(
    tmp_path: Path,
    backend: str,
    container: str,
    destroy_after: list[tuple[Provisioner, ContainerID]],
) -> tuple[Provisioner, ContainerID]:
    """A provisioner using `backend` and the id of a container it destroys after the test."""
    provisioner = await make_provisioner(tmp_path, backend)
    container_id = ContainerID(value=container)
    destroy_after.append((provisioner, container_id))
    return provisioner, container_id


def in_rootfs(rootfs: str, script: str) -> str:
    result = subprocess.run(
        ["chroot", rootfs, "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def runc_run(
    bundle: Path, rootfs: str, args: list[str]
) -> subprocess.CompletedProcess[str]:
    """Run `args` in a runc container on `rootfs`; the container is deleted afterwards."""
    bundle.mkdir()
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"] = {"path": rootfs, "readonly": False}
    spec["process"]["terminal"] = False
    spec["process"]["args"] = args
    (bundle / "config.json").write_text(json.dumps(spec))
    name = f"mesilla-test-{uuid.uuid4().hex[:12]}"
    try:
        return subprocess.run(
            ["runc", "run", "--bundle", str(bundle), name],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        subprocess.run(
            ["runc", "delete", "--force", name], capture_output=True, check=False
        )


def whiteout_names(rootfs: str) -> list[str]:
    return [
        os.path.join(current, name)
        for current, dirs, files in os.walk(rootfs)
        for name in dirs + files
        if name.startswith(".wh.")
    ]


@pytest.mark.parametrize("backend", ["overlay", "copy"])
async def test_layers_stack_with_whiteouts(
    tmp_path: Path,
    images: Path,
    backend: str,
    destroy_after: list[tuple[Provisioner, ContainerID]],
) -> None:
    provisioner, container_id = await provisioner_for(
        tmp_path, backend, "c1", destroy_after
    )

    info = await provisioner.provision(container_id, docker_image("layered:latest"))

    rootfs = info.rootfs
    assert rootfs.startswith(str(rootfses_dir(tmp_path, "c1", backend)))
    assert len(info.layers) == 2
    listing = in_rootfs(
        rootfs, "cat /etc/base-marker /etc/upper-marker; ls /opt/dir; ls /etc"
    )
    assert "base\nupper\n" in listing
    assert "upper-file" in listing
    assert "lower-file" not in listing  # hidden by the opaque directory
    assert "removed-by-upper" not in listing  # deleted by the whiteout
    assert whiteout_names(rootfs) == []
    assert os.readlink(os.path.join(rootfs, "bin", "sh")) == "busybox"
    assert info.image_config["config"]["Cmd"] == ["/bin/sh"]

    # The container's writes stay in its rootfs; the shared layers are untouched.
    in_rootfs(rootfs, "echo changed > /etc/base-marker && rm /bin/ls")
    for layer in info.layers:
        marker = os.path.join(layer, "etc", "base-marker")
        if os.path.exists(marker):
            assert Path(marker).read_text() == "base\n"
    assert os.path.lexists(os.path.join(info.layers[0], "bin", "ls"))

    await provisioner.destroy(container_id)
    assert not os.path.exists(rootfs)
    assert mount_points_under(str(tmp_path / "store")) == []


@pytest.mark.parametrize("backend", ["overlay", "copy"])
async def test_a_repeated_layer_applies_at_its_top_place(
    tmp_path: Path,
    images: Path,
    backend: str,
    destroy_after: list[tuple[Provisioner, ContainerID]],
) -> None:
    provisioner, container_id = await provisioner_for(
        tmp_path, backend, "repeated", destroy_after
    )

    info = await provisioner.provision(container_id, docker_image("repeated:latest"))

    assert len(info.layers) == 3
    # The base layer on top brings back what the whiteout layer below it hid.
    assert in_rootfs(
        info.rootfs, "cat /etc/removed-by-upper /etc/upper-marker; ls /opt/dir"
    ) == ("the upper layer deletes me\nupper\nlower-file\nupper-file\n")


async def test_bind_backend_mounts_a_single_layer_read_only(
    tmp_path: Path, images: Path, destroy_after: list[tuple[Provisioner, ContainerID]]
) -> None:
    provisioner, container_id = await provisioner_for(
        tmp_path, "bind", "bound", destroy_after
    )

    info = await provisioner.provision(container_id, docker_image("single:latest"))

    assert in_rootfs(info.rootfs, "cat /etc/base-marker") == "base\n"
    with pytest.raises(subprocess.CalledProcessError):
        in_rootfs(info.rootfs, "touch /new")
    assert mount_points_under(info.rootfs) == [os.path.realpath(info.rootfs)]

    with pytest.raises(BackendError, match="single-layer"):
        await provisioner.provision(container_id, docker_image("layered:latest"))

    await provisioner.destroy(container_id)
    assert mount_points_under(str(tmp_path)) == []


async def test_automatic_choice_is_overlay_here(tmp_path: Path) -> None:
    # This host (root, ext4, overlayfs in the kernel) supports overlay, so Mesos picks it.
    assert choose_backend(None, str(tmp_path / "store")).name == "overlay"


async def test_recover_removes_orphans_and_keeps_known(
    tmp_path: Path, images: Path, destroy_after: list[tuple[Provisioner, ContainerID]]
) -> None:
    first = await make_provisioner(tmp_path, "overlay")
    kept, orphan = ContainerID(value="kept"), ContainerID(value="orphan")
    nested_orphan = ContainerID(value="child", parent=kept)
    kept_info = await first.provision(kept, docker_image("layered:latest"))
    orphan_info = await first.provision(orphan, docker_image("layered:latest"))
    nested_info = await first.provision(nested_orphan, docker_image("single:latest"))
    await first.close()

    # An agent restart: a new provisioner learns which containers still exist.
    second = await make_provisioner(tmp_path, "overlay")
    destroy_after.append((second, kept))
    await second.recover([kept])

    assert not os.path.exists(orphan_info.rootfs)
    assert not os.path.exists(nested_info.rootfs)
    assert in_rootfs(kept_info.rootfs, "cat /etc/upper-marker") == "upper\n"
    assert mount_points_under(str(tmp_path)) == [os.path.realpath(kept_info.rootfs)]


async def test_agents_sharing_a_store_keep_their_own_rootfses(
    tmp_path: Path, images: Path, destroy_after: list[tuple[Provisioner, ContainerID]]
) -> None:
    # Two agents of one host, one image store: each keeps its rootfses under its own
    # --work_dir (as Mesos), so one's recovery cannot take the other's for orphans.
    def agent_flags(name: str) -> ContainerizerFlags:
        return dataclasses.replace(provisioner_flags(tmp_path, "overlay"), work_dir=str(tmp_path / name))

    first = await Provisioner.create(agent_flags("agent-a"))
    running = ContainerID(value="running")
    destroy_after.append((first, running))
    info = await first.provision(running, docker_image("layered:latest"))
    assert info.rootfs.startswith(str(tmp_path / "agent-a" / "provisioner") + "/")

    second = await Provisioner.create(agent_flags("agent-b"))
    await second.recover([])
    await second.close()

    assert in_rootfs(info.rootfs, "cat /etc/upper-marker") == "upper\n"
    assert mount_points_under(str(tmp_path)) == [os.path.realpath(info.rootfs)]


async def test_prune_keeps_images_in_use(
    tmp_path: Path, images: Path, destroy_after: list[tuple[Provisioner, ContainerID]]
) -> None:
    provisioner, running = await provisioner_for(
        tmp_path, "overlay", "running", destroy_after
    )
    in_use = await provisioner.provision(running, docker_image("layered:latest"))
    other = await provisioner.provision(
        ContainerID(value="gone"), docker_image("other:latest")
    )
    await provisioner.destroy(ContainerID(value="gone"))
    await provisioner.provision(
        ContainerID(value="excluded"), docker_image("single:latest")
    )
    await provisioner.destroy(ContainerID(value="excluded"))

    await provisioner.prune(
        [docker_image("single:latest")], [docker_image("layered:latest")]
    )

    kept = {image.name for image in provisioner.store.images()}
    assert kept == {"layered:latest", "single:latest"}
    assert all(os.path.isdir(layer) for layer in in_use.layers)
    assert not os.path.exists(other.layers[0])  # only `other:latest` used it
    assert in_rootfs(in_use.rootfs, "cat /etc/upper-marker") == "upper\n"

    # Pruning everything still keeps the layers a live rootfs stacks.
    await provisioner.prune([], [])
    assert provisioner.store.images() == []
    assert all(os.path.isdir(layer) for layer in in_use.layers)
    assert in_rootfs(in_use.rootfs, "cat /etc/upper-marker") == "upper\n"


async def test_failed_provision_leaves_no_rootfs(
    tmp_path: Path, images: Path, destroy_after: list[tuple[Provisioner, ContainerID]]
) -> None:
    provisioner, container_id = await provisioner_for(
        tmp_path, "bind", "fails", destroy_after
    )

    with pytest.raises(BackendError):
        await provisioner.provision(container_id, docker_image("layered:latest"))

    rootfses = rootfses_dir(tmp_path, "fails", "bind")
    assert not rootfses.exists() or list(rootfses.iterdir()) == []


async def test_cancelled_provision_is_undone(
    tmp_path: Path, images: Path, destroy_after: list[tuple[Provisioner, ContainerID]]
) -> None:
    provisioner, container_id = await provisioner_for(
        tmp_path, "overlay", "cancelled", destroy_after
    )
    await provisioner.provision(
        ContainerID(value="warm"), docker_image("layered:latest")
    )
    await provisioner.destroy(ContainerID(value="warm"))

    # Cancel at each point the provision awaits, until one run gets through uncancelled.
    for steps in range(1, 2000):
        task = asyncio.create_task(
            provisioner.provision(container_id, docker_image("layered:latest"))
        )
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.done():
            await provisioner.destroy(container_id)
            break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert mount_points_under(str(tmp_path)) == []
        rootfses = rootfses_dir(tmp_path, "cancelled", "overlay")
        assert not rootfses.exists() or list(rootfses.iterdir()) == []
    else:
        pytest.fail("provision never finished within 2000 event-loop steps")


async def test_automatic_backend_with_the_shared_image_dir(
    tmp_path: Path,
    busybox_image_dir: str,
    destroy_after: list[tuple[Provisioner, ContainerID]],
) -> None:
    flags = parse(
        CONTAINERIZER_FLAGS,
        [
            "--image_providers=docker",
            f"--docker_store_dir={tmp_path / 'docker'}",
            f"--docker_registry={busybox_image_dir}",
        ],
        environ={},
    )
    provisioner = await Provisioner.create(ContainerizerFlags.of(flags))
    container_id = ContainerID(value="auto")
    destroy_after.append((provisioner, container_id))

    info = await provisioner.provision(container_id, docker_image("busybox"))

    assert provisioner.backend.name == "overlay"
    assert (
        in_rootfs(info.rootfs, "cat /etc/upper-marker; test -d /mnt/mesos/sandbox")
        == "upper\n"
    )


@pytest.mark.parametrize("backend", ["overlay", "copy"])
async def test_provisioned_rootfs_runs_under_runc(
    tmp_path: Path,
    images: Path,
    backend: str,
    destroy_after: list[tuple[Provisioner, ContainerID]],
) -> None:
    provisioner, container_id = await provisioner_for(
        tmp_path, backend, "runc", destroy_after
    )
    info = await provisioner.provision(container_id, docker_image("layered:latest"))
    result = runc_run(
        tmp_path / "bundle",
        info.rootfs,
        ["/bin/sh", "-c", "cat /etc/upper-marker && ls /opt/dir"],
    )

    assert (result.returncode, result.stdout) == (0, "upper\nupper-file\n"), (
        result.stderr
    )
