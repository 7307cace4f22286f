"""Path-traversal input for the generated-input tests, and the canary tree that proves nothing
outside a daemon's directories changed.

`ids()` draws an id value with whether Mesos's rules refuse it: what climbs
(`..`, `../../x`), separators (`/`, `a/b`, `\\`), NUL and control characters,
more than a file name holds, and what only looks like them (`%2e%2e`,
`\u2024\u2024`, fullwidth `\uff0f`), which Mesos accepts as ordinary characters.
The classification is written out here, independent of the code under test.

`Canary` plants files and directories beside the daemon's work and runtime
directories, where `<dir>/containers/../../x` and the like would land, and
compares their listing and contents before and after.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

# (value, refused): refused by Mesos's common id rules (validateID, plus '.', '..' and NAME_MAX).
REFUSED = [
    "..",
    ".",
    "../../x",
    "../../../victim",
    "../victim",
    "..\\..\\victim",
    "/",
    "/etc",
    "a/b",
    "/../../victim",
    "\\",
    "\0",
    "a\0b",
    "\n",
    "\x01",
    "\x1b[2J",
    "\x7f",
    "x" * 256,
    "é" * 128,  # 256 bytes
    "",
]
ACCEPTED = [
    "%2e%2e",
    "%2e%2e%2fvictim",
    "..%2f..%2fvictim",
    "\u2024\u2024",
    "\u2024\u2024\u2215victim",
    "\uff0e\uff0e\uff0fvictim",
    "\uff0f",
    "...",
    "..a",
]
# A container id also refuses '.' and ' ' (and more than MAX_CONTAINER_ID_LENGTH bytes).
CONTAINER_ONLY_REFUSED = ["...", "..a", "a.b", "a b", "x" * 243]


@dataclass(frozen=True)
class Drawn:
    value: str
    refused: bool


def _climbing() -> st.SearchStrategy[str]:
    return st.builds(
        lambda n, sep, name: sep.join([".."] * n + [name]),
        st.integers(1, 8),
        st.sampled_from(["/", "\\"]),
        st.sampled_from(["victim", "etc", "x", ""]),
    )


def _with_control() -> st.SearchStrategy[str]:
    return st.builds(
        lambda a, c, b: a + c + b,
        st.text("ab.", max_size=3),
        st.characters(max_codepoint=0x1F) | st.just("\x7f"),
        st.text("ab.", max_size=3),
    )


def ids(*, container: bool = False) -> st.SearchStrategy[Drawn]:
    accepted = [v for v in ACCEPTED if not (container and v in CONTAINER_ONLY_REFUSED)]
    refused = REFUSED + (CONTAINER_ONLY_REFUSED if container else [])
    return st.one_of(
        st.sampled_from(refused).map(lambda v: Drawn(v, True)),
        st.sampled_from(accepted).map(lambda v: Drawn(v, False)),
        _climbing().map(lambda v: Drawn(v, True)),
        _with_control().map(lambda v: Drawn(v, True)),
    )


def container_ids(*, nested: bool) -> st.SearchStrategy[tuple[dict, bool]]:
    """A ContainerID (as JSON) with the drawn value at one of its levels, the others valid."""

    def build(drawn: Drawn, depth: int, at: int) -> tuple[dict, bool]:
        node: dict | None = None
        for level in range(depth):  # the root first
            value = drawn.value if level == at else f"c{level}"
            node = {"value": value, **({"parent": node} if node is not None else {})}
        assert node is not None
        return node, drawn.refused

    depths = st.integers(2, 3) if nested else st.integers(1, 3)
    return st.builds(lambda d, depth, at: build(d, depth, min(at, depth - 1)),
                     ids(container=True), depths, st.integers(0, 2))  # fmt: skip


class Canary:
    """Files and directories beside `kept` directories (and beside each of their parents up
    to `top`), where a climbing path lands; snapshotted by listing and content."""

    def __init__(self, top: Path, kept: list[Path]) -> None:
        self.top = top
        self.kept = {p.resolve() for p in kept}
        bases = {top}
        for path in kept:
            path.mkdir(parents=True, exist_ok=True)
            bases.update(p for p in path.parents if p.is_relative_to(top))
        for base in bases:
            for name in ("victim", "etc", "x"):
                (base / name).mkdir(exist_ok=True)
                (base / name / "precious").write_text(f"canary {base / name}")
            (base / "victim-file").write_text("canary file")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for directory, dirs, names in os.walk(self.top):
            here = Path(directory)
            dirs[:] = [d for d in dirs if (here / d).resolve() not in self.kept]
            for name in dirs + names:
                path = here / name
                relative = str(path.relative_to(self.top))
                if path.is_symlink():
                    found[relative] = "-> " + os.readlink(path)
                elif path.is_dir():
                    found[relative] = "dir"
                else:
                    found[relative] = path.read_text(errors="replace")
        return found

    def assert_intact(self, what: object) -> None:
        after = self.snapshot()
        assert after == self.before, f"{what!r} changed files outside the daemon's directories"
