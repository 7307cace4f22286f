"""The I/O switchboard server of one TTY container; a standalone, stdlib-only script.

Run as `python -I -S io_switchboard_server.py DIRECTORY CONSOLE_SOCKET STDOUT`
in its own session, detached from the agent, so that it outlives an agent
restart (as Mesos's `mesos-io-switchboard`). It

* listens on CONSOLE_SOCKET (`mesilla.containerizer.console`'s protocol) for
  the master of the container's pseudo-terminal, which the launcher sends, and
  then removes that socket and its directory;
* appends everything the master reads to STDOUT (the sandbox's `stdout`, raw,
  as Mesos's logger does for a TTY);
* serves clients on the unix socket `DIRECTORY/socket` (bound relative to
  DIRECTORY, so the 108-byte limit of socket paths applies to no long path);
* writes its pid to `DIRECTORY/pid`, then `ready` and a newline to fd 1;
* exits once the master reads end-of-file or EIO (every slave is closed: the
  container ended) or on SIGTERM, after closing its clients' connections
  (their EOF).

The protocol with the agent. A client connects and sends one line:

* `OUTPUT\\n`: it receives one byte, `+`, and from then on every byte the
  terminal outputs, raw, until the connection closes (the container ended).
* `INPUT\\n`: it receives one byte, `+` if it is the input client now, `!` if
  another one is (then the connection closes). Then it sends frames: a type
  byte, a 4-byte big-endian length, and that many bytes:
  - `D`: data typed into the terminal; an empty one is end-of-file, which a
    terminal reads as ^D (in canonical mode);
  - `W`: a window size, two big-endian 16-bit numbers: rows, columns.
  The server closes the connection when the container ended.
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import socket
import struct
import sys

OUTPUT = b"OUTPUT\n"
INPUT = b"INPUT\n"
ACCEPTED = b"+"
BUSY = b"!"
DATA = b"D"
WINDOW = b"W"
HEADER = struct.Struct("!cI")
WINDOW_SIZE = struct.Struct("!HH")
SOCKET = "socket"
PID_FILE = "pid"
END_OF_TRANSMISSION = b"\x04"
# Frames are typed text or a window size: a larger one is a broken client.
MAX_FRAME = 1 << 20
# An output client this far behind is dropped rather than buffered without bound.
MAX_BACKLOG = 8 << 20


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One input frame (`DATA` or `WINDOW`)."""
    return HEADER.pack(kind, len(payload)) + payload


def window_frame(rows: int, columns: int) -> bytes:
    return frame(WINDOW, WINDOW_SIZE.pack(rows, columns))


def next_frame(buffer: bytearray) -> tuple[bytes, bytes] | None:
    """The first complete frame of `buffer` (a bytearray, consumed) as (kind, payload),
    or None while it is incomplete; ValueError for a malformed one."""
    if len(buffer) < HEADER.size:
        return None
    kind, length = HEADER.unpack_from(buffer)
    if kind not in (DATA, WINDOW) or length > MAX_FRAME:
        raise ValueError(f"bad frame {kind!r} of {length} bytes")
    if kind == WINDOW and length != WINDOW_SIZE.size:
        raise ValueError(f"a window size frame has {length} bytes")
    if len(buffer) < HEADER.size + length:
        return None
    payload = bytes(buffer[HEADER.size : HEADER.size + length])
    del buffer[: HEADER.size + length]
    return kind, payload


def set_window_size(fd: int, payload: bytes) -> None:
    import fcntl
    import termios

    rows, columns = WINDOW_SIZE.unpack(payload)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


class Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.role: bytes | None = None  # OUTPUT or INPUT once its first line arrived
        self.incoming = bytearray()
        self.outgoing = bytearray()


class Server:
    def __init__(self, console_path: str, stdout_path: str) -> None:
        self.selector = selectors.DefaultSelector()
        self.console_path = console_path
        self.console: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.console.bind(console_path)
        self.console.listen(1)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(SOCKET)
        self.listener.listen(16)
        self.stdout = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.master: int | None = None  # the terminal's master; -1 once it ended
        self.clients: list[Client] = []
        self.input: Client | None = None  # the input client
        self.typed = bytearray()  # input not yet written to the master
        self.selector.register(self.console, selectors.EVENT_READ, self.receive_master)
        self.selector.register(self.listener, selectors.EVENT_READ, self.accept)

    def run(self) -> None:
        # SIGTERM only wakes the loop up: raised in a handler, it could cut a send short.
        wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        self.selector.register(wakeup_r, selectors.EVENT_READ, self.stop)
        while not self.stopped:
            for key, events in self.selector.select():
                if self.stopped:
                    break
                key.data(key.fileobj, events)

    @property
    def stopped(self) -> bool:
        return self.master == -1

    def stop(self, wakeup: int, events: int) -> None:
        os.read(wakeup, 64)
        if self.master is not None and self.master >= 0:
            self.selector.unregister(self.master)
            os.close(self.master)
        self.master = -1

    def receive_master(self, listener: socket.socket, events: int) -> None:
        connection, _ = listener.accept()
        with connection:
            _, fds, _, _ = socket.recv_fds(connection, 4096, 1)
        if not fds:
            return  # not a terminal: wait for the launcher's message
        self.close_console()
        self.master = fds[0]
        os.set_blocking(self.master, False)
        self.selector.register(self.master, selectors.EVENT_READ, self.on_master)
        self.feed()  # what an early input client typed

    def close_console(self) -> None:
        if self.console is None:
            return
        self.selector.unregister(self.console)
        self.console.close()
        self.console = None
        for remove in (os.unlink, os.rmdir):
            try:
                remove(self.console_path)
            except OSError:
                pass
            self.console_path = os.path.dirname(self.console_path)

    def accept(self, listener: socket.socket, events: int) -> None:
        sock, _ = listener.accept()
        sock.setblocking(False)
        client = Client(sock)
        self.clients.append(client)
        self.selector.register(sock, selectors.EVENT_READ, self.on_client)

    def on_client(self, sock: socket.socket, events: int) -> None:
        client = next((c for c in self.clients if c.sock is sock), None)
        if client is None:
            return  # dropped earlier in this round of events
        if events & selectors.EVENT_WRITE:
            self.flush(client)
        if events & selectors.EVENT_READ and client in self.clients:
            self.receive(client)

    def receive(self, client: Client) -> bool:
        """Reads and serves what the client sent; False once nothing more is there
        for now, or the client is gone."""
        try:
            data = client.sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.drop(client)
            return False
        client.incoming += data
        self.serve(client)
        return client in self.clients

    def settle(self, client: Client) -> None:
        """Serves everything the client has sent so far: it may have left already
        (an input client that has just finished), which the next one must not pay for."""
        while self.receive(client):
            pass

    def serve(self, client: Client) -> None:
        if client.role is None:
            if b"\n" not in client.incoming:
                if len(client.incoming) > len(OUTPUT):
                    self.drop(client)
                return
            line, _, rest = bytes(client.incoming).partition(b"\n")
            client.incoming[:] = rest
            client.role = line + b"\n"
            if client.role == INPUT:
                if self.input is not None:
                    self.settle(self.input)
                if self.input is not None:
                    self.send(client, BUSY)
                    self.flush(client)
                    self.drop(client)
                    return
                self.input = client
                self.send(client, ACCEPTED)
            elif client.role == OUTPUT:
                self.send(client, ACCEPTED)  # output from now on reaches it
            else:
                self.drop(client)
                return
        if client.role == INPUT:
            self.feed()
        else:
            client.incoming.clear()  # an output client has nothing to say

    def feed(self) -> None:
        """Applies the input client's frames while the terminal takes what is typed
        (the rest waits in the client's buffer, up to MAX_BACKLOG)."""
        client = self.input
        if client is None or self.master is None or self.master < 0:
            return
        master = self.master
        while not self.typed:
            try:
                parsed = next_frame(client.incoming)
            except ValueError as exc:
                print(f"io switchboard: dropping the input client: {exc}", file=sys.stderr)
                self.drop(client)
                return
            if parsed is None:
                break
            kind, payload = parsed
            if kind == WINDOW:
                set_window_size(master, payload)
            else:
                self.typed += payload or END_OF_TRANSMISSION
                self.write_master()
        if len(client.incoming) > MAX_BACKLOG:
            self.drop(client)

    def write_master(self) -> None:
        assert self.master is not None and self.master >= 0
        try:
            written = os.write(self.master, self.typed)
        except BlockingIOError:
            written = 0
        except OSError:
            written = len(self.typed)  # the container is gone: its end follows
        del self.typed[:written]
        self.update_master()

    def update_master(self) -> None:
        assert self.master is not None and self.master >= 0
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.typed else 0)
        self.selector.modify(self.master, events, self.on_master)

    def on_master(self, master: int, events: int) -> None:
        if events & selectors.EVENT_WRITE:
            self.write_master()
            if not self.typed:
                self.feed()
        if not events & selectors.EVENT_READ:
            return
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            data = b""  # EIO: the last slave is closed
        if not data:
            self.selector.unregister(master)
            os.close(master)
            self.master = -1
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self.stdout, view) :]
        for client in list(self.clients):
            if client.role == OUTPUT:
                self.send(client, data)

    def send(self, client: Client, data: bytes) -> None:
        client.outgoing += data
        if len(client.outgoing) > MAX_BACKLOG:
            self.drop(client)
            return
        self.flush(client)

    def flush(self, client: Client) -> None:
        try:
            sent = client.sock.send(client.outgoing) if client.outgoing else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self.drop(client)
            return
        del client.outgoing[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.outgoing else 0)
        self.selector.modify(client.sock, events, self.on_client)

    def drop(self, client: Client) -> None:
        self.clients.remove(client)
        self.selector.unregister(client.sock)
        client.sock.close()
        if client is self.input:
            self.input = None
            self.typed.clear()

    def close(self) -> None:
        """Tells every client the end: what is buffered, then EOF."""
        for client in list(self.clients):
            client.sock.settimeout(1.0)
            try:
                client.sock.sendall(client.outgoing)
            except OSError:
                pass
            self.drop(client)
        self.close_console()
        self.listener.close()
        try:
            os.unlink(SOCKET)
        except OSError:
            pass


def main(args: list[str]) -> None:
    directory, console_path, stdout_path = args
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.chdir(directory)
    server = Server(console_path, stdout_path)
    try:
        tmp = f"{PID_FILE}.tmp"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.rename(tmp, PID_FILE)
        os.write(1, b"ready\n")
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        server.run()
    finally:
        server.close()


if __name__ == "__main__":
    main(sys.argv[1:])
