"""The real Mesos clients the compatibility tests drive, built or installed once per machine.

Each lives under /tmp/mesilla-compat (a cache across sessions, as Go's build
cache is): mesos-go 0.0.6 as Debian packages it, built with Debian's Go into
this folder's own programs (clients/mesos_go/), and pymesos 0.3.15 from PyPI in
a Python 3.11 venv of its own. A client that cannot be had here skips its
tests, except under CI, where it fails them: CI has every package.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent / "clients"
CACHE = Path(os.environ.get("MESILLA_COMPAT_CACHE", "/tmp/mesilla-compat"))
MESOS_GO_SOURCES = Path("/usr/share/gocode/src/github.com/mesos/mesos-go/api")
GO_PROGRAMS = ("v1sched", "v1operator", "v0sched", "v0exec")


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        unavailable(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


@contextmanager
def locked() -> Iterator[None]:
    """One installer at a time on this machine: sessions share the cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_mesos_go() -> Path:
    """Builds the mesos-go programs in GOPATH mode, offline; returns their folder."""
    if shutil.which("go") is None or not (MESOS_GO_SOURCES / "v0" / "scheduler").is_dir():
        unavailable("needs Debian's golang-go and golang-github-mesos-mesos-go-dev (scripts/setup.sh)")
    gopath, bin_dir = CACHE / "gopath", CACHE / "mesos-go-bin"
    source = gopath / "src" / "mesilla-compat"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(CLIENTS / "mesos_go", source)
    env = {**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "GOPROXY": "off", "CGO_ENABLED": "0",
           "GOPATH": f"{gopath}:/usr/share/gocode", "GOCACHE": str(CACHE / "go-cache")}
    for program in GO_PROGRAMS:
        run(["go", "build", "-o", str(bin_dir / program), f"mesilla-compat/{program}"], env=env)
    return bin_dir


def install_pymesos() -> Path:
    """A venv with pymesos 0.3.15; returns its python.

    pymesos needs http-parser 0.9.0, whose shipped parser.c predates Python
    3.11: it is regenerated from the shipped .pyx with Cython < 3.
    """
    venv = CACHE / "pymesos"
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import pymesos, http_parser.parser"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    if sys.version_info[:2] != (3, 11):
        unavailable("pymesos's http-parser builds on CPython 3.11 only")
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "install", "-q"]
    run([*pip, "cython<3", "six", "addict", "kazoo"])
    with tempfile.TemporaryDirectory() as tmp:
        run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", tmp,
             "http-parser==0.9.0"])
        run(["tar", "xzf", f"{tmp}/http-parser-0.9.0.tar.gz", "-C", tmp])
        package = Path(tmp) / "http-parser-0.9.0"
        (package / "http_parser" / "parser.c").unlink()
        run([str(venv / "bin" / "cython"), "http_parser/parser.pyx"], cwd=package)
        run([*pip, str(package)])
    run([*pip, "pymesos==0.3.15"])
    return python


def install_avmesos_cli() -> Path:
    """A venv with avmesos-cli 1.3.0; returns its `mesos-cli` script (which runs the venv's `python`).

    Its wheel declares Python >= 3.12, but nothing in it needs 3.12: every
    module compiles on 3.11 and it uses no API newer than 3.11. Debian 12 has
    3.11 only, so it is installed with --ignore-requires-python.
    """
    venv = CACHE / "avmesos-cli"
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import avmesos.cli.plugins.task.main"]
    if not (python.exists() and subprocess.run(check, capture_output=True).returncode == 0):
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(python), "-m", "pip", "install", "-q", "--ignore-requires-python", "avmesos-cli==1.3.0"])
    return venv / "bin" / "mesos-cli"
