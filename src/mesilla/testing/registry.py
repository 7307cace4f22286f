"""A real Docker registry for tests: Debian's `docker-registry` on 127.0.0.1.

    with start_registry() as registry:
        push_image(registry.url, "library/busybox", "latest", build_image())

It gets a private config, storage directory and free port; `stop` (or leaving
the `with` block) ends the process and removes the directory. Its access log is
kept in `log_path` so tests can see which blobs were fetched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from mesilla.common import files

_CONFIG = """\
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: mesilla-test-registry
"""


class RegistryStartError(RuntimeError):
    pass


@dataclass
class Registry:
    url: str  # http://127.0.0.1:<port>
    directory: str  # config, storage and log live here
    process: subprocess.Popen[bytes]

    @property
    def host(self) -> str:
        """`127.0.0.1:<port>`, the registry part of image names."""
        return self.url.split("://", 1)[1]

    @property
    def storage(self) -> str:
        return os.path.join(self.directory, "storage")

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, "registry.log")

    def blob_data_path(self, digest: str) -> str:
        """Where the registry keeps a blob's bytes (tests corrupt it there)."""
        hexdigest = digest.split(":", 1)[1]
        return os.path.join(
            self.storage,
            "docker/registry/v2/blobs/sha256",
            hexdigest[:2],
            hexdigest,
            "data",
        )

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def blob_fetches(self, digest: str) -> int:
        """How many times a GET of the blob `digest` reached the registry."""
        return sum(
            1
            for line in self.log().splitlines()
            if '"GET ' in line and f"/blobs/{digest} " in line
        )

    def kill(self) -> None:
        """kill -9, the directory kept: the registry vanishes, mid-transfer if one is going."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def restart(self, timeout: float = 30.0) -> None:
        """Serves again, on the same port with the same storage, after `kill`."""
        self.kill()
        self.process = _spawn(self.directory)
        _wait_ready(self, timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        files.remove_tree(os.path.dirname(self.directory), self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_registry(binary: str = "docker-registry", timeout: float = 30.0) -> Registry:
    path = shutil.which(binary)
    if path is None:
        raise RegistryStartError(
            f"'{binary}' not found: apt-get install docker-registry"
        )
    directory = tempfile.mkdtemp(prefix="mesilla-registry-")
    port = _free_port()
    config = os.path.join(directory, "config.yml")
    with open(config, "w") as f:
        f.write(_CONFIG.format(storage=os.path.join(directory, "storage"), port=port))
    registry = Registry(f"http://127.0.0.1:{port}", directory, _spawn(directory, path))
    try:
        _wait_ready(registry, timeout)
    except BaseException:
        registry.stop()
        raise
    return registry


def _spawn(directory: str, binary: str = "docker-registry") -> subprocess.Popen[bytes]:
    with open(os.path.join(directory, "registry.log"), "ab") as log:
        return subprocess.Popen(
            [shutil.which(binary) or binary, "serve", os.path.join(directory, "config.yml")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _wait_ready(registry: Registry, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if registry.process.poll() is not None:
            raise RegistryStartError(
                f"docker-registry exited with {registry.process.returncode}: {registry.log()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(f"{registry.url}/v2/", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise RegistryStartError(
                f"docker-registry did not answer on {registry.url} in {timeout}s"
            )
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
