"""The TTY switchboard server: its framing, and the script against a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesilla.agent import io_switchboard_server as server
from mesilla.containerizer import console


def test_frames_round_trip_and_wait_for_their_end() -> None:
    stream = (
        server.frame(server.DATA, b"ls\n")
        + server.window_frame(40, 120)
        + server.frame(server.DATA)
    )
    buffer = bytearray(stream[:-1])
    assert server.next_frame(buffer) == (server.DATA, b"ls\n")
    assert server.next_frame(buffer) == (server.WINDOW, struct.pack("!HH", 40, 120))
    assert server.next_frame(buffer) is None  # the last header is one byte short
    buffer += stream[-1:]
    assert server.next_frame(buffer) == (server.DATA, b"")
    assert buffer == bytearray()


@pytest.mark.parametrize(
    "bad",
    [
        struct.pack("!cI", b"X", 0),
        struct.pack("!cI", b"D", server.MAX_FRAME + 1),
        struct.pack("!cI", b"W", 3) + b"abc",
    ],
)
def test_malformed_frames_are_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        server.next_frame(bytearray(bad))


class Running:
    def __init__(self, tmp: Path) -> None:
        self.directory = tmp / "board"
        self.directory.mkdir()
        self.stdout = tmp / "stdout"
        # As the agent does: a short private directory, the runtime's console socket path.
        self.console_dir = tempfile.mkdtemp(prefix="mesilla-console-")
        self.process = subprocess.Popen(
            [
                sys.executable, "-I", "-S", server.__file__,
                str(self.directory), os.path.join(self.console_dir, "socket"), str(self.stdout),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == b"ready\n"
        master, self.slave = os.openpty()
        console.send(os.path.join(self.console_dir, "socket"), master, os.ttyname(self.slave))
        os.close(master)

    def connect(self, role: bytes) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.directory / server.SOCKET))
        sock.sendall(role)
        if role == server.OUTPUT:
            assert sock.recv(1) == server.ACCEPTED  # output from now on reaches it
        return sock

    def close(self) -> None:
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    board = Running(tmp_path)
    try:
        yield board
    finally:
        board.close()


def _read_until(sock: socket.socket, wanted: bytes) -> bytes:
    data = b""
    while wanted not in data:
        chunk = sock.recv(4096)
        assert chunk, f"EOF before {wanted!r}: {data!r}"
        data += chunk
    return data


def test_server_relays_logs_types_resizes_and_ends_with_its_terminal(running: Running) -> None:
    output = running.connect(server.OUTPUT)
    typist = running.connect(server.INPUT)
    assert typist.recv(1) == server.ACCEPTED
    second = running.connect(server.INPUT)
    assert second.recv(1) == server.BUSY
    assert second.recv(1) == b""  # and it is sent away
    second.close()

    # The container's output: to every output client and to the sandbox's stdout.
    os.write(running.slave, b"from the container\n")
    assert b"from the container" in _read_until(output, b"container\r\n")

    typist.sendall(server.window_frame(33, 77) + server.frame(server.DATA, b"typed\n"))
    typed = b""
    while b"\n" not in typed:
        typed += os.read(running.slave, 100)
    assert typed == b"typed\n"
    size = fcntl.ioctl(running.slave, termios.TIOCGWINSZ, b"\0" * 8)
    assert struct.unpack("HHHH", size)[:2] == (33, 77)
    assert b"typed" in _read_until(output, b"typed\r\n")  # the terminal's echo

    # End-of-file on a terminal: ^D, which a canonical reader takes as a 0-byte read.
    typist.sendall(server.frame(server.DATA))
    assert os.read(running.slave, 100) == b""

    # The last slave closed: the clients get EOF, the server exits and leaves no socket.
    os.close(running.slave)
    running.slave = -1
    while output.recv(4096):
        pass
    assert typist.recv(1) == b""
    assert running.process.wait(timeout=10) == 0
    assert not (running.directory / server.SOCKET).exists()
    assert not os.path.exists(running.console_dir)
    assert (running.directory / server.PID_FILE).read_text() == str(running.process.pid)
    assert running.stdout.read_bytes().startswith(b"from the container\r\n")
    output.close()
    typist.close()


def test_an_input_client_that_leaves_frees_the_input(running: Running) -> None:
    first = running.connect(server.INPUT)
    assert first.recv(1) == server.ACCEPTED
    first.close()
    for _ in range(100):  # the server notices the close in its own time
        again = running.connect(server.INPUT)
        reply = again.recv(1)
        again.close()
        if reply == server.ACCEPTED:
            break
    assert reply == server.ACCEPTED


def test_sigterm_ends_the_server(running: Running) -> None:
    output = running.connect(server.OUTPUT)
    running.process.terminate()
    assert output.recv(1) == b""
    assert running.process.wait(timeout=10) == 0
    assert not (running.directory / server.SOCKET).exists()
    output.close()
