"""Compiles Mesos's .proto files into the descriptor sets the protobuf encoding loads.

Run by `scripts/setup.sh` (``python -m mesilla.v1.proto.build``), and by
`mesilla.v1.proto` itself when a set is missing. The sources are Mesos's
messages as Debian ships them with mesos-go (``golang-github-mesos-mesos-go-dev``,
their gogoproto options from ``golang-github-gogo-protobuf-dev``), compiled by
Debian's ``protoc``. What it writes (``_generated/``) is not committed: only
descriptor sets, no generated Python, so any protobuf runtime reads them.

* ``v1.desc``: the v1 APIs (packages ``mesos``, ``mesos.scheduler``,
  ``mesos.executor``, ``mesos.master``, ``mesos.agent``; mesos-go drops the
  ``v1`` of Mesos's package names, which the wire never carries).
* ``v0.desc``: the libprocess messages (``src/messages/messages.proto`` and the
  v0 frameworks' SASL messages, ``authentication.proto``; package ``mesosproto``
  here for Mesos's ``mesos.internal``/``mesos``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from mesilla.common import files

GOCODE = os.environ.get("MESILLA_PROTO_SOURCES", "/usr/share/gocode/src")
GENERATED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_generated")
_MESOS_GO = "github.com/mesos/mesos-go/api"

# name -> (extra include directory or None, the files compiled with their imports)
SETS: dict[str, tuple[str | None, list[str]]] = {
    "v1": (
        None,
        [
            f"{_MESOS_GO}/v1/lib/{name}.proto"
            for name in ("mesos", "scheduler/scheduler", "executor/executor", "master/master", "agent/agent")
        ],
    ),
    "v0": (f"{_MESOS_GO}/v0/mesosproto", ["mesos.proto", "messages.proto", "authentication.proto"]),
}


class BuildError(Exception):
    pass


def path(name: str) -> str:
    return os.path.join(GENERATED, f"{name}.desc")


def build(name: str) -> str:
    """Writes `name`'s descriptor set (atomically) and returns its path."""
    protoc = shutil.which("protoc")
    if protoc is None:
        raise BuildError("protoc not found: install Debian's protobuf-compiler (scripts/setup.sh)")
    include, sources = SETS[name]
    includes = [GOCODE, "/usr/include"]
    if include is not None:
        includes.insert(0, os.path.join(GOCODE, include))
    missing = [f for f in sources if not any(os.path.exists(os.path.join(i, f)) for i in includes)]
    if missing:
        raise BuildError(
            f"Mesos's .proto files not found under {GOCODE} ({', '.join(missing)}): "
            "install golang-github-mesos-mesos-go-dev and golang-github-gogo-protobuf-dev"
        )
    os.makedirs(GENERATED, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=GENERATED, suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)
        result = subprocess.run(
            [
                protoc,
                *(f"-I{i}" for i in includes),
                "--include_imports",
                f"--descriptor_set_out={tmp}",
                *sources,
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise BuildError(f"protoc failed for {name}: {result.stderr.strip()}")
        files.replace(GENERATED, tmp, path(name))
    finally:
        if os.path.exists(tmp):
            files.remove_file(GENERATED, tmp)
    return path(name)


def main() -> int:
    try:
        for name in SETS:
            build(name)
    except BuildError as exc:
        print(f"mesilla.v1.proto.build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
