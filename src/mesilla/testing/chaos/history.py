"""What each framework of the load did and saw, in order, with timestamps.

`RecordingFramework` is the tests' `Framework` that writes every call it makes
(with the master's answer: 202, another status, or a connection error) and
every event it reads into one `History`, which the checker judges afterwards.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from mesilla.testing.scheduler import Framework, FrameworkError, Json

# How a call ended, from the framework's side.
ACCEPTED = "202"
UNREACHED = "unreached"  # no answer (connection refused, reset, timed out): it may have taken effect


@dataclass(frozen=True)
class Event:
    at: float  # seconds since the history began
    source: str  # a framework's name, or "chaos" for faults and checks
    kind: str  # "call", "update", "subscribed", "fault", "recovered", "note"
    data: Json


@dataclass
class History:
    started: float = field(default_factory=time.monotonic)
    events: list[Event] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    def add(self, source: str, kind: str, /, **data: Any) -> Event:
        event = Event(round(self.now(), 3), source, kind, data)
        self.events.append(event)
        return event

    def dump(self, path: Path) -> None:
        """One JSON array per line: at, source, kind, data."""
        with open(path, "w") as f:
            for e in self.events:
                f.write(json.dumps([e.at, e.source, e.kind, e.data]) + "\n")

    def of(self, source: str, kind: str | None = None) -> list[Event]:
        return [e for e in self.events if e.source == source and (kind is None or e.kind == kind)]


class RecordingFramework(Framework):
    def __init__(self, master: str, name: str, history: History, **options: Any) -> None:
        super().__init__(master, name, **options)
        self.history = history

    async def call(self, kind: str, payload: Json | None = None) -> None:
        outcome = ACCEPTED
        try:
            await super().call(kind, payload)
        except FrameworkError as exc:
            outcome = str(exc).split(":", 1)[0].rsplit(" ", 1)[-1]  # "... answered 4xx: ..." -> "4xx"
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            outcome = UNREACHED
            raise FrameworkError(f"{kind}: {exc!r}") from exc
        finally:
            self.history.add(self.info["name"], "call", type=kind, payload=payload, outcome=outcome)

    async def _handle(self, event: Json, subscribed: Any) -> None:
        kind = event["type"]
        if kind == "UPDATE":
            status = event["update"]["status"]
            self.history.add(self.info["name"], "update", task_id=status["task_id"]["value"],
                             state=status["state"], reason=status.get("reason"), uuid=status.get("uuid"),
                             source=status.get("source"), message=status.get("message"),
                             agent_id=status.get("agent_id", {}).get("value"))  # fmt: skip
        elif kind == "SUBSCRIBED":
            framework_id = event["subscribed"]["framework_id"]
            self.history.add(self.info["name"], "subscribed", framework_id=framework_id)
        elif kind == "ERROR":
            self.history.add(self.info["name"], "error", message=event.get("error", {}).get("message"))
        elif kind == "RESCIND":
            # A rescinded offer is void: launching on it only gets TASK_DROPPED (invalid offers).
            rescinded = event["rescind"]["offer_id"]["value"]
            self.offers = [o for o in self.offers if o["id"]["value"] != rescinded]
        await super()._handle(event, subscribed)
