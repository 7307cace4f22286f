"""The network between each agent and the master, for the net_* faults.

Everything between an agent and the master flows from the agent: its REGISTER
stream and its calls are connections to `--master` (the master never dials
an agent). So each agent's `--master` is a `Link`: a relay listening on
127.0.0.1 that carries every connection across a veth pair between two
network namespaces of its own (`mesilla-chaos-<hex>-a<i>` and `...-m<i>`,
10.253.<i>.1 and .2) and on to the master, whose own port the frameworks and
the harness keep using directly; executors reach their agent as before.
The kernel's TCP runs on that veth, so the faults are real packet faults:

* partition: iptables `DROP` of everything on the veth (inside the agent-side
  namespace), until healed;
* loss: the same with the `statistic --mode random --probability p` match
  (this kernel has no netem qdisc);
* slow: the relay holds each chunk `delay` seconds before passing it on.

`Network.remove` deletes the namespaces (their veths and rules go with them);
`ChaosCluster.cleanup` calls it, so every exit path of a run removes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import uuid

from mesilla.testing.cluster import free_port
from mesilla.testing.netns import entered

INNER_PORT = 5050  # the relay's listener in the master-side namespace
CONNECT_TIMEOUT = 5.0  # a connection into a partition gives up like one to a dead host
CHUNK = 1 << 16


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


async def _iptables(namespace: str, *argv: str) -> None:
    """iptables inside `namespace` (run from the event loop: a heal must not wait for a
    worker thread that waits for the heal)."""
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", namespace, "iptables", "-w", *argv,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await process.communicate()
    if process.returncode:
        raise OSError(f"iptables {' '.join(argv)} in {namespace}: {err.decode(errors='replace').strip()}")


def _socket_in(namespace: str) -> socket.socket:
    """A TCP socket of `namespace` (a socket stays in the namespace it was made in).

    Made on the calling thread (the event loop's: two setns calls, no thread can start
    meanwhile), not in a worker: the harness's waits for recovery fill the default
    executor, and a relay waiting behind them would keep the agent from recovering."""
    with entered(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


class Link:
    """Agent `index`'s way to the master at 127.0.0.1:`master_port`."""

    def __init__(self, prefix: str, index: int, master_port: int) -> None:
        self.index = index
        self.master_port = master_port
        self.port = free_port()  # the agent's --master
        self.agent_side = f"{prefix}-a{index}"
        self.master_side = f"{prefix}-m{index}"
        self.inner_ip = f"10.253.{index}.2"
        self.delay = 0.0
        self._servers: list[asyncio.Server] = []
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def create(self) -> None:
        """The two namespaces and the veth between them."""
        for name in (self.agent_side, self.master_side):
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", self.agent_side, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
            "netns", self.master_side)  # fmt: skip
        for name, dev, ip in ((self.agent_side, "veth0", f"10.253.{self.index}.1"),
                              (self.master_side, "veth1", self.inner_ip)):  # fmt: skip
            _ip("-n", name, "addr", "add", f"{ip}/30", "dev", dev)
            _ip("-n", name, "link", "set", dev, "up")

    def remove(self) -> None:
        for name in (self.agent_side, self.master_side):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)

    async def start(self) -> None:
        inner = _socket_in(self.master_side)
        inner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        inner.bind((self.inner_ip, INNER_PORT))
        self._servers.append(await asyncio.start_server(self._to_master, sock=inner, backlog=128))
        outer = await asyncio.start_server(self._from_agent, "127.0.0.1", self.port, backlog=128)
        self._servers.append(outer)

    async def stop(self) -> None:
        """No more connections; those open are cut (their handlers then return)."""
        for server in self._servers:
            server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        self._servers.clear()

    # --- the faults -------------------------------------------------------------------

    async def drop(self, probability: float | None = None) -> None:
        """Drops the veth's packets both ways: each with `probability`, or all (a partition)."""
        match = [] if probability is None else ["-m", "statistic", "--mode", "random",
                                                "--probability", f"{probability:.3f}"]  # fmt: skip
        await _iptables(self.agent_side, "-A", "OUTPUT", "-o", "veth0", *match, "-j", "DROP")
        await _iptables(self.agent_side, "-A", "INPUT", "-i", "veth0", *match, "-j", "DROP")

    async def heal(self) -> None:
        await _iptables(self.agent_side, "-F", "OUTPUT")
        await _iptables(self.agent_side, "-F", "INPUT")

    # --- relaying ---------------------------------------------------------------------

    async def _from_agent(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """An agent's connection: on across the veth, from a socket of the agent side."""
        sock = _socket_in(self.agent_side)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await asyncio.get_running_loop().sock_connect(sock, (self.inner_ip, INNER_PORT))
            inner = await asyncio.open_connection(sock=sock)
        except (OSError, TimeoutError):
            sock.close()
            writer.close()
            return
        await self._relay((reader, writer), inner)

    async def _to_master(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            master = await asyncio.open_connection("127.0.0.1", self.master_port)
        except OSError:
            writer.close()
            return
        await self._relay((reader, writer), master)

    async def _relay(
        self, a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:  # fmt: skip
        pipes = [asyncio.create_task(self._pipe(a[0], b[1])), asyncio.create_task(self._pipe(b[0], a[1]))]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for _, writer in (a, b):
                writer.close()
            self._pipes.difference_update(pipes)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copies until EOF; each chunk leaves `delay` seconds (as set when it came) after it came."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            with contextlib.suppress(OSError):
                while data := await reader.read(CHUNK):
                    queue.put_nowait((loop.time() + self.delay, data))
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(OSError):
                await sender
        finally:
            sender.cancel()


class Network:
    """One `Link` per agent; `create` before the agents start, `remove` whatever happened."""

    def __init__(self, master_port: int, agents: int) -> None:
        prefix = f"mesilla-chaos-{uuid.uuid4().hex[:6]}"
        self.links = [Link(prefix, i, master_port) for i in range(agents)]
        self.created = False

    def create(self) -> None:
        self.created = True
        for link in self.links:
            link.create()

    async def start(self) -> None:
        for link in self.links:
            await link.start()

    async def stop(self) -> None:
        for link in self.links:
            await link.stop()

    def remove(self) -> None:
        if self.created:
            for link in self.links:
                link.remove()
            self.created = False
