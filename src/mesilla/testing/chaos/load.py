"""The steady load: checkpointing frameworks launching command tasks and pods,
killing the long-running ones after a while, and launching more, through any fault.

Each framework is PARTITION_AWARE (a hung agent's tasks go TASK_UNREACHABLE, not
a TASK_LOST that may be followed by TASK_RUNNING again), fails over with its id
whenever its subscription breaks, and keeps at most `max_live` tasks running.
Its choices come from its own `random.Random`, seeded from the run's seed.
A pod's image is now and then the next of `variants` (images of their own
layers, pushed at set-up) rather than the common one, so that agents keep
pulling images they have not pulled yet while the registry may vanish.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from mesilla.testing.chaos.history import History, RecordingFramework
from mesilla.testing.scheduler import TERMINAL_STATES, FrameworkError, Json, scalar

TASK_CPUS, TASK_MEM = 0.1, 32.0
EXECUTOR_RESOURCES = {"cpus": 0.1, "mem": 32.0, "disk": 10.0}
CALL_TIMEOUT = 30.0
LONG_COMMAND = "sleep 3600"
VARIANT_SHARE = 0.3  # of pods


@dataclass
class Launched:
    task_id: str
    pod: str | None  # the executor id of its pod, None for a command task
    long: bool  # runs until killed
    kill_at: float  # when the framework kills it (long tasks), seconds on the history's clock


def task_info(name: str, command: str, image: str | None) -> Json:
    info: Json = {
        "name": name,
        "task_id": {"value": f"{name}-{uuid.uuid4().hex[:8]}"},
        "resources": [scalar("cpus", TASK_CPUS), scalar("mem", TASK_MEM)],
        "command": {"value": command},
    }
    if image is not None:
        docker = {"type": "DOCKER", "docker": {"name": image}}
        info["container"] = {"type": "MESOS", "mesos": {"image": docker}}
    return info


class Load:
    def __init__(self, master: str, history: History, seed: int, image: str, *,
                 variants: Sequence[str] = (), frameworks: int = 2, max_live: int = 4) -> None:  # fmt: skip
        self.history = history
        self.image = image
        self.variants = list(variants)
        self.variants_used = 0
        self.max_live = max_live
        self.frameworks = [
            RecordingFramework(
                master, f"chaos-{i}", history, failover_timeout=3600.0, capabilities=["PARTITION_AWARE"]
            )
            for i in range(frameworks)
        ]
        self.rngs = [random.Random(f"{seed}-load-{i}") for i in range(frameworks)]
        self.launched: dict[str, dict[str, Launched]] = {f.info["name"]: {} for f in self.frameworks}
        self.stopping = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []

    def start(self) -> None:
        pairs = zip(self.frameworks, self.rngs, strict=True)
        self._loops = [asyncio.create_task(self._run(f, r)) for f, r in pairs]

    async def stop(self) -> None:
        """No more launches or kills; the frameworks stay subscribed for the checks."""
        self.stopping.set()
        await asyncio.gather(*self._loops)

    def tasks_launched(self) -> int:
        return sum(len(by_id) for by_id in self.launched.values())

    def live(self, framework: RecordingFramework) -> list[Launched]:
        """Tasks neither ended nor unknown to the master (its answer to a KILL of a task it
        forgot, say after a failover: the task does not hold a place of the load's)."""
        gone = TERMINAL_STATES | {"TASK_UNKNOWN"}
        launched = self.launched[framework.info["name"]].values()
        return [t for t in launched if framework.state(t.task_id) not in gone]

    async def ensure_subscribed(self, framework: RecordingFramework, timeout: float = 10.0) -> bool:
        if framework.connected:
            return True
        try:
            await framework.subscribe(timeout=timeout)
        except FrameworkError:
            return False
        return True

    async def _run(self, framework: RecordingFramework, rng: random.Random) -> None:
        while not self.stopping.is_set():
            try:
                async with asyncio.timeout(CALL_TIMEOUT * 3):
                    await self._step(framework, rng)
            except (FrameworkError, TimeoutError):
                pass  # a master down or restarting: the next step fails over
            try:
                await asyncio.wait_for(self.stopping.wait(), rng.uniform(0.3, 1.0))
            except TimeoutError:
                pass

    async def _step(self, framework: RecordingFramework, rng: random.Random) -> None:
        if not await self.ensure_subscribed(framework):
            return
        now = self.history.now()
        for task in self.live(framework):
            if task.long and now >= task.kill_at:
                task.kill_at = now + 20  # again later, if this KILL does not end it
                await framework.kill(task.task_id)
        offers, framework.offers = framework.offers, []
        for offer in offers:
            if len(self.live(framework)) < self.max_live:
                await self._launch(framework, rng, offer)
            else:
                decline = {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 1}}
                await framework.call("DECLINE", decline)

    async def _launch(self, framework: RecordingFramework, rng: random.Random, offer: Json) -> None:
        now = self.history.now()

        def command() -> tuple[str, bool]:
            kind = rng.choice(["finish", "finish", "fail", "long", "long"])
            if kind == "finish":
                return f"sleep {rng.randint(1, 8)}; exit 0", False
            if kind == "fail":
                return f"sleep {rng.randint(1, 4)}; exit 3", False
            return LONG_COMMAND, True

        name = framework.info["name"]
        if rng.random() < 0.5:
            cmd, long = command()
            info = task_info("cmd", cmd, None)
            self.launched[name][info["task_id"]["value"]] = Launched(info["task_id"]["value"], None, long,
                                                                     now + rng.uniform(5, 30))  # fmt: skip
            await self._accept(framework, [info["task_id"]["value"]], framework.launch(offer, [info]))
            return
        executor: Json = {
            "type": "DEFAULT",
            "executor_id": {"value": f"pod-{uuid.uuid4().hex[:8]}"},
            "resources": [scalar(k, v) for k, v in EXECUTOR_RESOURCES.items()],
        }
        tasks = []
        image = self.image
        if self.variants and rng.random() < VARIANT_SHARE:
            image = self.variants[self.variants_used % len(self.variants)]
            self.variants_used += 1
        for _ in range(rng.randint(1, 2)):
            cmd, long = command()
            info = task_info("podtask", cmd, image)
            tasks.append(info)
            self.launched[name][info["task_id"]["value"]] = Launched(
                info["task_id"]["value"], executor["executor_id"]["value"], long, now + rng.uniform(5, 30)
            )
        ids = [t["task_id"]["value"] for t in tasks]
        await self._accept(framework, ids, framework.launch_group(offer, executor, tasks))

    async def _accept(
        self, framework: RecordingFramework, task_ids: list[str], accept: Awaitable[None]
    ) -> None:
        """The ACCEPT; tasks it failed for leave the load's books (an unanswered one may
        have launched them after all: the history keeps them, the checker reconciles them)."""
        try:
            await accept
        except FrameworkError:
            for task_id in task_ids:
                del self.launched[framework.info["name"]][task_id]
            raise
