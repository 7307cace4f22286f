"""Every destructive file call in `src/` goes through `mesilla.common.files`.

The helpers there refuse a target outside the root they are given, so no id
or path from outside can make Mesilla delete, rename over or unmount anything
else. This walks the source with `ast` and names each call (or reference, or
import) that bypasses them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mesilla

SRC = Path(mesilla.__file__).parent

# The module that holds the helpers: the only one that calls the primitives.
HELPERS = "common/files.py"

# Where no root can be given, each with its reason.
ALLOWED = {
    # Run as `python -I -S`, stdlib only (it outlives the agent and must not load
    # the package); it removes only its own socket, pid file and the console
    # socket directory the agent made for it.
    "agent/io_switchboard_server.py": "a standalone stdlib-only server script",
    # Imports nothing beyond the interpreter's own modules (it is paid per
    # container); it renames only its own status file's temporary into place.
    "containerizer/launcher/posix_nanny.py": "a standalone script that imports nothing",
    # Run as `python -I -S` inside the task's new mount namespace, stdlib only; its one
    # unmount detaches the old root stacked under the new one after pivot_root(".", ".").
    "executor/task_rootfs.py": "a standalone stdlib-only script, after pivot_root",
    # The zygote's forked children: they rename only their monitor files' temporaries
    # into place, and the one unmount is of the old root after pivot_root(".", ".").
    "executor/zygote.py": "the forked executor's own pivot_root and monitor files",
}

_MODULE_FUNCTIONS = {
    "os": {"unlink", "remove", "rmdir", "removedirs", "rename", "renames", "replace"},
    "shutil": {"rmtree", "move"},
}
# Methods of pathlib.Path and libc (`Path.replace` is left out: `str.replace` shares the name).
_METHODS = {"unlink", "rmdir", "rename", "umount2", "umount"}
_COMMANDS = {"umount", "rm", "rmdir", "mv"}


def _offences(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and node.attr in _MODULE_FUNCTIONS.get(base.id, ()):
                found.append((node.lineno, f"{base.id}.{node.attr}"))
            elif node.attr in _METHODS and not (
                isinstance(base, ast.Name) and base.id in ("files", "_mount")
            ):
                found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module in _MODULE_FUNCTIONS:
            for alias in node.names:
                if alias.name in _MODULE_FUNCTIONS[node.module]:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Call):
            for arg in node.args:
                if isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
                    first = arg.elts[0]
                    if isinstance(first, ast.Constant) and first.value in _COMMANDS:
                        found.append((node.lineno, f"command {first.value!r}"))
    return found


def test_destructive_calls_go_through_the_helpers() -> None:
    offences = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name == HELPERS or name in ALLOWED:
            continue
        for line, what in _offences(ast.parse(path.read_text(), str(path))):
            offences.append(f"{name}:{line}: {what}")
    assert not offences, (
        "destructive calls that bypass mesilla.common.files (remove_tree, remove_file, "
        "remove_dir, replace, unmount):\n" + "\n".join(offences)
    )


def test_the_allow_list_names_only_offending_modules() -> None:
    """An entry whose module no longer needs it goes, so the list stays short and true."""
    for name in ALLOWED:
        assert _offences(ast.parse((SRC / name).read_text())), f"{name} needs no exemption"


def test_the_walk_finds_each_kind_of_bypass() -> None:
    source = """
import os, shutil, subprocess
from os import unlink
shutil.rmtree(x)
os.replace(a, b)
for f in (os.unlink, os.rmdir):
    f(p)
Path(p).unlink()
libc.umount2(p, 0)
subprocess.run(["umount", "-l", p])
files.remove_tree(root, p)
"""
    kinds = sorted(what for _, what in _offences(ast.parse(source)))
    assert kinds == sorted(
        [
            "from os import unlink",
            "shutil.rmtree",
            "os.replace",
            "os.unlink",
            "os.rmdir",
            ".unlink",
            ".umount2",
            "command 'umount'",
        ]
    )
