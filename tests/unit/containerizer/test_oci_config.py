"""The linux launcher's pure parts: OCI config, host view, conmon's exit codes (no root)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from mesilla.containerizer.launcher import host_rootfs, monitor, oci


def test_namespaces_always_include_mount_and_joining_wins() -> None:
    specs = oci.namespaces({"pid", "ipc"}, {"ipc": "/proc/7/ns/ipc", "network": "/proc/7/ns/net"})
    assert specs == [
        {"type": "pid"},
        {"type": "network", "path": "/proc/7/ns/net"},
        {"type": "mount"},
        {"type": "ipc", "path": "/proc/7/ns/ipc"},
    ]
    with pytest.raises(ValueError, match="bogus"):
        oci.namespaces({"bogus"}, {})


def test_rlimits_take_mesos_or_spec_names_and_none_is_unlimited() -> None:
    assert oci.rlimits([("RLMT_NOFILE", 1024, None), ("RLIMIT_CORE", 0, 0)]) == [
        {"type": "RLIMIT_NOFILE", "soft": 1024, "hard": oci.UNLIMITED},
        {"type": "RLIMIT_CORE", "soft": 0, "hard": 0},
    ]


def test_capabilities_are_normalized_and_default_to_the_agents_bounding_set() -> None:
    assert oci.capability_names(["net_raw", "CAP_KILL"]) == ["CAP_NET_RAW", "CAP_KILL"]
    default = oci.capability_names(None)
    assert set(default) <= set(oci.CAPABILITIES)
    with open("/proc/self/status") as f:
        bounding = next(int(line.split()[1], 16) for line in f if line.startswith("CapBnd:"))
    assert len(default) == bounding.bit_count()


@pytest.fixture
def rootfs(tmp_path: Path) -> str:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n"
    )
    (tmp_path / "etc/group").write_text("root:x:0:\napp:x:1001:\nextra:x:2000:app,other\n")
    return str(tmp_path)


def test_user_is_resolved_in_the_rootfs(rootfs: str) -> None:
    assert oci.resolve_user(None, rootfs) == oci.User(0, 0)
    assert oci.resolve_user("app", rootfs) == oci.User(1000, 1001, [2000])
    assert oci.resolve_user("1000", rootfs) == oci.User(1000, 1001, [2000])
    assert oci.resolve_user("4242:4343", rootfs) == oci.User(4242, 4343, [])
    with pytest.raises(oci.UserNotFound, match=r"'ghost'.*numeric uid"):
        oci.resolve_user("ghost", rootfs)


def test_config_sets_hostname_only_with_a_new_uts_namespace() -> None:
    common = {
        "process_spec": {}, "rootfs": "/r", "mounts": [], "cgroups_path": "/m/c",
        "resources": {}, "hostname": "h",
    }  # fmt: skip
    own = oci.config(namespace_specs=oci.namespaces({"uts"}, {}), **common)  # type: ignore[arg-type]
    assert own["hostname"] == "h" and own["linux"]["cgroupsPath"] == "/m/c"
    joined = oci.config(
        namespace_specs=oci.namespaces(set(), {"uts": "/proc/1/ns/uts"}), **common  # type: ignore[arg-type]
    )
    assert "hostname" not in joined


def test_process_runs_argv_with_env_cwd_and_ambient_caps_for_non_root() -> None:
    spec = oci.process(["/bin/x", "a"], {"A": "1"}, "/s", oci.User(5, 6), [], ["CAP_KILL"])
    assert spec["args"] == ["/bin/x", "a"] and spec["cwd"] == "/s"
    assert f"PATH={oci.DEFAULT_PATH}" in spec["env"] and "A=1" in spec["env"]
    assert spec["user"] == {"uid": 5, "gid": 6}
    assert spec["capabilities"]["ambient"] == ["CAP_KILL"]
    assert oci.process(["/x"], {}, "/", oci.User(0, 0), [], [])["capabilities"]["ambient"] == []
    # Without capability information a non-root user keeps none across exec.
    default = oci.process(["/x"], {}, "/", oci.User(5, 6), [], None)["capabilities"]
    assert default["ambient"] == [] and "CAP_KILL" not in default["ambient"]


def test_process_bounding_set_as_mesos_sets_it() -> None:
    caps = oci.process(
        ["/x"], {}, "/", oci.User(0, 0), [], ["CHOWN"], bounding=["CHOWN", "KILL"]
    )["capabilities"]
    assert caps["effective"] == caps["permitted"] == ["CAP_CHOWN"]
    # Inheritable is the bounding set: no file capability grants more than it.
    assert caps["bounding"] == caps["inheritable"] == ["CAP_CHOWN", "CAP_KILL"]
    same = oci.process(["/x"], {}, "/", oci.User(0, 0), [], ["CHOWN"])["capabilities"]
    assert same["bounding"] == same["inheritable"] == ["CAP_CHOWN"]


def test_process_with_terminal_gets_the_window_size() -> None:
    spec = oci.process(
        ["/x"], {}, "/", oci.User(0, 0), [], [], terminal=True,
        window_size={"rows": 31, "columns": 97},
    )  # fmt: skip
    assert spec["terminal"] is True and spec["consoleSize"] == {"height": 31, "width": 97}
    plain = oci.process(["/x"], {}, "/", oci.User(0, 0), [], [])
    assert plain["terminal"] is False and "consoleSize" not in plain


def test_capability_mask_numbers_names_as_the_kernel() -> None:
    assert oci.capability_mask(["CAP_CHOWN", "NET_RAW", "cap_sys_admin"]) == 1 | 1 << 13 | 1 << 21
    assert oci.capability_mask([]) == 0
    with pytest.raises(ValueError, match="CAP_NOPE"):
        oci.capability_mask(["NOPE"])


def test_host_view_binds_the_host_read_only_but_tmp_and_recreates_symlinks(tmp_path: Path) -> None:
    host = tmp_path / "host"
    for name in ("usr", "etc", "proc", "tmp", "dev"):
        (host / name).mkdir(parents=True)
    (host / "bin").symlink_to("usr/bin")
    (host / "marker").write_text("x")
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    mounts = host_rootfs.prepare(str(rootfs), str(host))
    assert [m["destination"] for m in mounts] == ["/etc", "/marker", "/tmp", "/usr"]
    assert all("rbind" in m["options"] for m in mounts)
    writable = [m["destination"] for m in mounts if "rw" in m["options"]]
    assert writable == ["/tmp"]  # the host's /tmp, shared as Mesos shares it
    assert os.readlink(rootfs / "bin") == "usr/bin"
    assert sorted(os.listdir(rootfs)) == ["bin"]  # the runtime makes the mount points


@pytest.mark.parametrize(
    ("code", "exited", "value"),
    [(0, True, 0), (3, True, 3), (128 + signal.SIGKILL, False, signal.SIGKILL),
     (128 + signal.SIGTERM, False, signal.SIGTERM), (255, True, 255)],
)  # fmt: skip
def test_conmon_exit_codes_become_raw_wait_statuses(code: int, exited: bool, value: int) -> None:
    status = monitor.wait_status(code)
    if exited:
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == value
    else:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == value
