"""No known blocking call runs on the event loop: none appears directly inside an `async def`.

Ruff's ASYNC rules catch `open`, `time.sleep` and `subprocess` in async code;
this walks `src/` with `ast` for what they do not know, or know only in part:
a call written directly in an `async def`, including Mesilla's own durable
writes and tree removals. A nested plain `def` or lambda does not count: it is
code that runs elsewhere, e.g. in a thread through
`mesilla.common.blocking.in_thread`. Each exception in ALLOWED says why it may block.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mesilla

SRC = Path(mesilla.__file__).parent

# module -> the functions of it that block on the disk, on time or on a child process.
BLOCKING = {
    "os": {"fsync", "fdatasync", "sync", "system", "wait", "waitpid"},
    "shutil": {"rmtree", "copytree", "copyfile", "copy", "copy2", "move"},
    "time": {"sleep"},
    "subprocess": {"run", "call", "check_call", "check_output"},
    # Mesilla's own: a durable write fsyncs the file and its directory.
    "mesilla.common.files": {"write_atomically", "write_all_atomically", "fsync_directory", "remove_tree"},
}

# "path:async function": why a blocking call may stay there.
ALLOWED: dict[str, str] = {}


def _imports(tree: ast.AST) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """(local name -> module, local name -> (module, function)) for BLOCKING's modules."""
    modules: dict[str, str] = {}
    functions: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in BLOCKING:
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{node.module}.{alias.name}" in BLOCKING:
                    modules[local] = f"{node.module}.{alias.name}"
                elif alias.name in BLOCKING.get(node.module, ()):
                    functions[local] = (node.module, alias.name)
    return modules, functions


def _does_not_block(call: ast.Call, function: str) -> bool:
    """The call's own arguments say it returns at once."""
    if function == "waitpid":  # WNOHANG
        return any("WNOHANG" in ast.unparse(arg) for arg in call.args)
    if function == "write_atomically":  # no fsync
        return any(
            k.arg == "durable" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in call.keywords
        )
    return False


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.AST) -> None:
        self.path = path
        self.modules, self.functions = _imports(tree)
        self.found: list[str] = []
        self._async: list[str] = []  # the enclosing functions, innermost last; "" for a plain one

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._async.append(node.name)
        self.generic_visit(node)
        self._async.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._async.append("")
        self.generic_visit(node)
        self._async.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._async.append("")
        self.generic_visit(node)
        self._async.pop()

    def _blocking(self, call: ast.Call) -> tuple[str, str] | None:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = self.modules.get(func.value.id)
            if module is not None and func.attr in BLOCKING[module]:
                return module, func.attr
        elif isinstance(func, ast.Name):
            return self.functions.get(func.id)
        return None

    def visit_Call(self, node: ast.Call) -> None:
        blocking = self._blocking(node)
        if blocking is not None and self._async and self._async[-1]:
            module, function = blocking
            where = f"{self.path}:{self._async[-1]}"
            if where not in ALLOWED and not _does_not_block(node, function):
                self.found.append(f"{where}: {module}.{function} (line {node.lineno})")
        self.generic_visit(node)


def blocking_calls(source: str, path: str = "<source>") -> list[str]:
    tree = ast.parse(source, path)
    finder = _Finder(path, tree)
    finder.visit(tree)
    return finder.found


def test_the_walk_finds_direct_calls_and_skips_nested_defs() -> None:
    source = '''
import os
import shutil
import subprocess
import time as clock
from mesilla.common import files
from mesilla.common.files import write_atomically

async def direct(fd):
    os.fsync(fd)
    clock.sleep(1)
    files.remove_tree("/r", "/r/x")
    write_atomically("/p", b"")
    write_atomically("/p", b"", durable=False)  # no fsync: fine
    os.waitpid(-1, os.WNOHANG)  # returns at once: fine

async def nested(path):
    def work():
        shutil.rmtree(path)
    await in_thread(work)
    await in_thread(lambda: time.sleep(1))
    await in_thread(os.fsync, 3)  # passed, not called: fine

def plain():
    subprocess.run(["true"])
'''
    assert blocking_calls(source) == [
        "<source>:direct: os.fsync (line 10)",
        "<source>:direct: time.sleep (line 11)",
        "<source>:direct: mesilla.common.files.remove_tree (line 12)",
        "<source>:direct: mesilla.common.files.write_atomically (line 13)",
    ]


def test_no_blocking_call_inside_async_def() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += blocking_calls(path.read_text(), path.relative_to(SRC).as_posix())
    assert not found, (
        "blocking calls on the event loop: move them into a plain function run through "
        "mesilla.common.blocking.in_thread (or say in ALLOWED why they may block):\n" + "\n".join(found)
    )
