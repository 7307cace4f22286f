"""A private Open vSwitch: ovsdb-server and ovs-vswitchd of one host, started by Mesilla.

Debian's `openvswitch-switch` service is not relied on (it may be denied, or
serve another owner): `OvsInstance(directory)` keeps its database, sockets,
pid files and logs in `directory` and talks to its daemons only through
them. ovs-vswitchd opens ports in the network namespace it runs in, so each
simulated host starts its own instance inside its namespace.

The daemons detach (`--detach`): they outlive the process that started them,
as a pod's ports must outlive an agent restart. `start` finds an instance
already running in its directory (by its pid files) and keeps it; `stop`
signals exactly the pids those files name, once `/proc` confirms that they
are this directory's daemons.

Bridges use the userspace datapath (`datapath_type=netdev`) where the kernel
has no Open vSwitch datapath (this kernel: no `ovs_datapath` generic netlink
family), with userspace TSO on, which also makes it handle the checksum
offload of the veths it switches. Its ports are then AF_PACKET sockets of
ovs-vswitchd, whose receive buffers `add_port` widens (`widen_packet_buffers`).
OVSDB has no library among Mesilla's dependencies, so the few configuration
calls shell out to `ovs-vsctl` and `ovs-ofctl`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable

from mesilla.common import files, procfs

SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
DAEMONS = ("ovs-vswitchd", "ovsdb-server")
START_TIMEOUT = 10.0
#: The receive buffer of a userspace datapath's port (the kernel doubles it for its overhead).
PACKET_RECEIVE_BUFFER = 2 << 20
_SO_RCVBUFFORCE = 33
_SYS_PIDFD_GETFD = 438  # the same number on every architecture
_libc = ctypes.CDLL(None, use_errno=True)


class OvsError(RuntimeError):
    """An Open vSwitch command failed or a daemon did not start; the message says which."""


def kernel_datapath() -> bool:
    """Whether this kernel has Open vSwitch's datapath (its generic netlink family)."""
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.generic import GenericNetlinkSocket

    with contextlib.closing(GenericNetlinkSocket()) as sock:
        try:
            sock.discovery("ovs_datapath")
        except NetlinkError:
            return False
    return True


class OvsInstance:
    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)

    @property
    def db(self) -> str:
        return f"unix:{self.directory}/db.sock"

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "OVS_RUNDIR": self.directory, "OVS_LOGDIR": self.directory,
                "OVS_DBDIR": self.directory}  # fmt: skip

    # --- the daemons -----------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        """The live daemons of this directory: name -> pid."""
        found = {}
        for daemon in DAEMONS:
            try:
                with open(self._path(f"{daemon}.pid")) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                continue
            if _is_daemon_of(pid, daemon, self.directory):
                found[daemon] = pid
        return found

    @property
    def running(self) -> bool:
        return len(self.pids()) == len(DAEMONS)

    def start(self) -> None:
        """Starts both daemons unless they run already (a restarted agent keeps its switch)."""
        if self.running:
            return
        self.stop()  # one of the two alone is of no use
        os.makedirs(self.directory, exist_ok=True)
        conf = self._path("conf.db")
        with contextlib.suppress(FileNotFoundError):
            files.remove_file(self.directory, conf)  # its owner rebuilds the switch: start empty
        self._run(["ovsdb-tool", "create", conf, SCHEMA])
        self._run(["ovsdb-server", conf, f"--remote=p{self.db}", "--detach", "--no-chdir",
                   f"--pidfile={self._path('ovsdb-server.pid')}",
                   f"--unixctl={self._path('ovsdb-server.ctl')}",
                   f"--log-file={self._path('ovsdb-server.log')}"])  # fmt: skip
        self.vsctl("--no-wait", "init")
        # Read once at start-up. Without it the userspace datapath forwards the partial
        # checksums a veth leaves to its peer (TCP then fails, ICMP not), and turning the
        # pods' checksum offload off instead also turns TSO off: 3-4x less throughput.
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true")
        self._run(["ovs-vswitchd", self.db, "--detach", "--no-chdir",
                   f"--pidfile={self._path('ovs-vswitchd.pid')}",
                   f"--unixctl={self._path('ovs-vswitchd.ctl')}",
                   f"--log-file={self._path('ovs-vswitchd.log')}"])  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not self.running:
            if time.monotonic() > deadline:
                raise OvsError(f"Open vSwitch in {self.directory} did not start: see its logs there")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to this directory's daemons (SIGKILL after `timeout`), waited for."""
        pids = self.pids()
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for daemon, pid in pids.items():
            while _is_daemon_of(pid, daemon, self.directory):
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.02)

    # --- configuration -----------------------------------------------------------------

    def vsctl(self, *args: str) -> str:
        return self._run(["ovs-vsctl", f"--db={self.db}", "--timeout=10", *args])

    def ofctl(self, command: str, bridge: str, *args: str, stdin: str | None = None) -> str:
        """`ovs-ofctl command <bridge's management socket> args` (OpenFlow 1.3, with Nicira
        extensions: replace-flows needs more than 1.0)."""
        target = f"unix:{self._path(bridge + '.mgmt')}"
        return self._run(["ovs-ofctl", "-O", "OpenFlow13", command, target, *args], stdin)

    def add_bridge(self, bridge: str, *settings: str) -> None:
        """The bridge (kept if there), on the userspace datapath where the kernel has none."""
        datapath = "system" if kernel_datapath() else "netdev"
        self.vsctl("--may-exist", "add-br", bridge, "--", "set", "bridge", bridge,
                   f"datapath_type={datapath}", *settings)  # fmt: skip

    def add_port(self, bridge: str, port: str, *settings: str) -> None:
        args = ["--may-exist", "add-port", bridge, port]
        if settings:
            args += ["--", "set", "port", port, *settings]
        self.vsctl(*args)  # returns once ovs-vswitchd has opened the port
        self.widen_packet_buffers()

    def widen_packet_buffers(self) -> None:
        """Gives ovs-vswitchd's AF_PACKET sockets (the userspace datapath's ports)
        `PACKET_RECEIVE_BUFFER` to receive into.

        It opens them with net.core.rmem_default, 208 KiB: three 64 KiB TSO frames. A frame
        that finds the buffer full while the switch waits for a CPU is dropped (a TCP stream
        across three switches lost one segment in eight on a loaded 2-core machine, half its
        throughput), and a network namespace cannot raise the default (read-only outside the
        initial one). Open vSwitch has no setting for it, so the buffers are widened through
        duplicates of its sockets (pidfd_getfd: the daemon is this instance's own). Nothing to
        do on the kernel datapath, whose ports are no sockets.
        """
        pid = self.pids().get("ovs-vswitchd")
        if pid is None:
            return
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return  # gone meanwhile
        try:
            for name in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                        _widen(pidfd, int(name))
        finally:
            os.close(pidfd)

    def delete_port(self, bridge: str, port: str) -> None:
        self.vsctl("--if-exists", "del-port", bridge, port)

    def ports(self, bridge: str) -> list[str]:
        return self.vsctl("list-ports", bridge).split()

    def ofport(self, interface: str) -> int | None:
        """The OpenFlow port number of `interface`, None until the switch has opened it."""
        try:
            number = int(self.vsctl("get", "interface", interface, "ofport").strip())
        except (OvsError, ValueError):
            return None
        return number if number > 0 else None

    def replace_flows(self, bridge: str, flows: Iterable[str]) -> None:
        """Makes `flows` the bridge's whole table, changing only what differs."""
        self.ofctl("replace-flows", bridge, "-", stdin="\n".join(flows) + "\n")

    def _run(self, argv: list[str], stdin: str | None = None) -> str:
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                  env=self._env(), timeout=30, check=False)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OvsError(f"{argv[0]} failed: {exc} (is openvswitch-switch installed?)") from None
        if done.returncode != 0:
            raise OvsError(f"{' '.join(argv[:4])}... failed: {done.stderr.strip()[-500:]}")
        return done.stdout


def _widen(pidfd: int, fd: int) -> None:
    duplicate = _libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
    if duplicate < 0:
        return  # closed meanwhile, or not ours to take
    with socket.socket(fileno=duplicate) as sock:
        if sock.family == socket.AF_PACKET and (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < 2 * PACKET_RECEIVE_BUFFER
        ):
            sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, PACKET_RECEIVE_BUFFER)


def _is_daemon_of(pid: int, daemon: str, directory: str) -> bool:
    """Whether `pid` is a live (not zombie) `daemon` whose command line names `directory`."""
    process = procfs.stat(pid)
    if process is None or process.state == "Z":
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return (
        bool(argv)
        and os.path.basename(argv[0].decode(errors="replace")) == daemon
        and any(directory.encode() in arg for arg in argv)
    )
