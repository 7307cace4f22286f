"""One chaos run: a cluster under load, the schedule's faults, then the quiet checks.

    registry = start_registry()
    image, variants = push_images(registry)
    cluster = chaos_cluster(root, registry.url)   # master, 2 agents, linux launcher, tmpfs disks,
                                                  # each agent's own link to the master
    report = await run_chaos(cluster, image, schedule, seed=seed, seconds=60,
                             registry=registry, variants=variants)
    assert not report.violations, report.text()

After the last fault (and at least `seconds` of load) the load stops launching;
every daemon must be back on its own; every task settles (running or ended);
an implicit and then an explicit RECONCILE must agree with what the frameworks
saw; the master's used resources must add up to the live tasks'; every
image variant must pull and run on every agent (a pull the registry's fault
cut short left nothing behind that is used); then the frameworks kill what
still runs, and every task must have ended exactly once,
acknowledged; after TEARDOWN nothing of the cluster may be left on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mesilla.testing.chaos import check
from mesilla.testing.chaos.history import History, RecordingFramework
from mesilla.testing.chaos.inject import RECOVERY_TIMEOUT, Injector, mount_disks
from mesilla.testing.chaos.load import EXECUTOR_RESOURCES, Load, task_info
from mesilla.testing.chaos.network import Network
from mesilla.testing.chaos.schedule import Fault, describe
from mesilla.testing.images import build_image, push_image
from mesilla.testing.processes import LINUX_AGENT_FLAGS as AGENT_FLAGS
from mesilla.testing.processes import Cluster, DaemonError, http_json
from mesilla.testing.registry import Registry
from mesilla.testing.scheduler import TERMINAL_STATES, FrameworkError, Json, scalar

# A hung agent is unreachable after 5 s: agent_stop faults (1-10 s) hit both sides of it.
MASTER_FLAGS = ["--agent_ping_timeout=1secs", "--max_agent_ping_timeouts=5"]
SETTLE_TIMEOUT = 240.0


VARIANTS = 24  # images of their own layers, besides the common one
PROBE_ATTEMPTS = 3
INVALID_OFFERS = "REASON_INVALID_OFFERS"


class ChaosCluster(Cluster):
    """A `Cluster` whose agents reach the master over a `Network` of links (created with
    `create_network`, removed by `cleanup`)."""

    def __init__(self, root: Path, registry_url: str, agents: int) -> None:
        super().__init__(root, num_agents=agents, master_flags=MASTER_FLAGS,
                         agent_flags=[*AGENT_FLAGS, f"--docker_registry={registry_url}"])  # fmt: skip
        self.network = Network(self.master_port, agents)
        for agent, link in zip(self.agents, self.network.links, strict=True):
            agent.flags = [f"--master={link.address}" if f.startswith("--master=") else f
                           for f in agent.flags]  # fmt: skip

    def cleanup(self) -> list[str]:
        try:
            return super().cleanup()
        finally:
            self.network.remove()


def chaos_cluster(root: Path, registry_url: str, agents: int = 2) -> ChaosCluster:
    return ChaosCluster(root, registry_url, agents)


def push_images(registry: Registry, variants: int = VARIANTS) -> tuple[str, list[str]]:
    """busybox as `library/busybox:latest`, and `variants` images of distinct layers
    (`library/busybox:variant-<k>`); returns their names."""
    push_image(registry.url, "library/busybox", "latest", build_image(with_whiteouts=True))
    names = []
    for k in range(variants):
        tag = f"variant-{k}"
        push_image(registry.url, "library/busybox", tag, build_image(extra_files={"variant": tag.encode()}))
        names.append(f"{registry.host}/library/busybox:{tag}")
    return f"{registry.host}/library/busybox:latest", names


@dataclass
class Report:
    seed: int | None
    schedule: list[Fault]
    injected: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    tasks: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    history: Path | None = None  # where the run's history was written

    def text(self) -> str:
        lines = [describe(self.seed, self.schedule),
                 f"faults injected: {dict(self.injected)}; nothing to hit: {dict(self.skipped)}",
                 f"tasks launched: {self.tasks}; run took {self.seconds:.0f}s",
                 f"violations: {len(self.violations)}", *(f"  - {v}" for v in self.violations)]  # fmt: skip
        if self.history is not None:
            lines.append(f"history: {self.history}")
        if self.seed is not None:
            lines.append(f"rerun: MESILLA_CHAOS_SEED={self.seed} (same schedule, same fault order)")
        return "\n".join(lines)


async def run_chaos(
    cluster: ChaosCluster, image: str, schedule: list[Fault], *, seed: int | None, seconds: float,
    registry: Registry | None = None, variants: list[str] | None = None, frameworks: int = 2,
    disks: bool = True,
) -> Report:  # fmt: skip
    """Starts `cluster` (not yet started), runs the load and the faults, checks; the caller
    cleans the cluster up (`Cluster.cleanup`) whatever happens. `registry` (the one
    `image` and `variants` come from) is the registry_down fault's."""
    started = time.monotonic()
    # Recovery waits hold worker threads for minutes, several at once: room for the rest.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(32, thread_name_prefix="chaos"))
    report = Report(seed, schedule)
    mounted = mount_disks(cluster) if disks else []
    cluster.network.create()
    await cluster.network.start()
    history = History()
    load = Load(cluster.master_address, history, seed or 0, image, variants=variants or [],
                frameworks=frameworks)  # fmt: skip
    injector = Injector(cluster, history, mounted, network=cluster.network, registry=registry)
    try:
        await asyncio.to_thread(cluster.start, 120.0)
        history.started = time.monotonic()
        load.start()
        await injector.run(schedule)
        await asyncio.sleep(max(0.0, seconds - history.now()))
        await load.stop()
        report.violations += await quiet_checks(cluster, history, load, injector, variants or [])
    finally:
        for framework in load.frameworks:
            await framework.close()
        await cluster.network.stop()
        report.history = cluster.log_dir / "history.jsonl"  # beside the daemons' logs
        history.dump(report.history)
    report.violations += [f"left behind: {item}" for item in await leftovers(cluster, mounted)]
    report.violations[:0] = injector.violations
    report.injected, report.skipped = injector.counts, injector.skipped
    report.tasks = sum(len(check.launched_tasks(history, f.info["name"])) for f in load.frameworks)
    report.seconds = time.monotonic() - started
    return report


async def leftovers(cluster: Cluster, disks: list[Path], timeout: float = 120.0) -> list[str]:
    """What the cluster still holds once its frameworks are gone, but the harness's own
    disks (containers end asynchronously: polled until none, or the deadline)."""
    ours = {f"mount {d}" for d in disks}
    deadline = time.monotonic() + timeout
    while True:
        left = [item for item in await asyncio.to_thread(cluster.leftovers) if item not in ours]
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.5)


async def quiet_checks(
    cluster: Cluster, history: History, load: Load, injector: Injector, variants: list[str]
) -> list[str]:
    violations: list[str] = []
    injector.check_alive()
    for i in range(len(cluster.agents)):
        try:
            await asyncio.to_thread(cluster.await_agent_active, i, RECOVERY_TIMEOUT)
        except DaemonError as exc:
            violations.append(f"agent {i} not active once quiet: {exc}")
    for framework in load.frameworks:
        if not await resubscribe(load, framework):
            violations.append(f"{framework.info['name']}: no SUBSCRIBE within {RECOVERY_TIMEOUT}s once quiet")
            return violations
    for framework in load.frameworks:
        violations += await settle(cluster, history, framework)
        violations += await reconcile(history, framework)
    violations += await check_resources(cluster, history, load.frameworks)
    used = variants[: load.variants_used]
    violations += await probe_pulls(cluster, history, load.frameworks, used)
    for framework in load.frameworks:
        violations += await kill_all(history, framework)
        violations += check.check_tasks(history, framework.info["name"])
    return violations


async def resubscribe(load: Load, framework: RecordingFramework) -> bool:
    deadline = time.monotonic() + RECOVERY_TIMEOUT
    while not await load.ensure_subscribed(framework, 20.0):
        if time.monotonic() > deadline:
            return False
    return True


def records(history: History, framework: RecordingFramework) -> dict[str, check.TaskRecord]:
    return check.launched_tasks(history, framework.info["name"])


async def settle(cluster: Cluster, history: History, framework: RecordingFramework) -> list[str]:
    """Waits until every task ended, or runs if it is a long one. One the framework heard
    nothing of yet (its launch may still be on its way), or last heard TASK_UNREACHABLE
    from a master that failed over since (`TaskRecord.forgotten`), is settled once the
    master does not know it either: nothing more will come of it then."""

    def done(record: check.TaskRecord, known: set[str]) -> bool:
        last = record.last()
        if last is None or record.forgotten:
            return record.task_id not in known
        return last in TERMINAL_STATES or (record.long and last == "TASK_RUNNING")

    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        known = await asyncio.to_thread(master_tasks, cluster, framework)
        stuck = {t: r.states() for t, r in records(history, framework).items() if not done(r, known)}
        if not stuck:
            return []
        if time.monotonic() > deadline:
            return [f"{framework.info['name']}: tasks not settled within {SETTLE_TIMEOUT}s: {stuck}"]
        await asyncio.sleep(0.5)


def master_tasks(cluster: Cluster, framework: RecordingFramework) -> set[str]:
    """The ids of the framework's tasks the master holds (live, unacknowledged or unreachable)."""
    framework_id = (framework.framework_id or {}).get("value")
    for entry in http_json(f"{cluster.master_url}/state").get("frameworks", []):
        if entry["id"] == framework_id:
            return {t["id"] for t in [*entry.get("tasks", []), *entry.get("unreachable_tasks", [])]}
    return set()


async def reconcile(history: History, framework: RecordingFramework) -> list[str]:
    name = framework.info["name"]
    before = records(history, framework)
    live = {t for t, r in before.items() if r.live()}
    history.add("chaos", "note", reconcile=name, text="implicit RECONCILE")

    def answered() -> set[str]:
        return {t for t, r in records(history, framework).items() if r.answers}

    await framework.call("RECONCILE", {"tasks": []})
    with contextlib.suppress(FrameworkError):
        await framework.until(lambda: live <= answered(), 60, "answers to the implicit RECONCILE")
    await asyncio.sleep(2)  # answers beyond the live tasks, if any, come with them
    implicit = answered()
    ids = list(before)
    await framework.reconcile(ids)
    with contextlib.suppress(FrameworkError):
        await framework.until(lambda: all(framework.reconciled(t) for t in ids), 60,
                              "answers to the explicit RECONCILE")  # fmt: skip
    return [f"{name}: {v}" for v in check.check_reconciliation(before, records(history, framework), implicit)]


async def check_resources(
    cluster: Cluster, history: History, frameworks: list[RecordingFramework]
) -> list[str]:
    """The master's used cpus and mem per agent equal the live tasks' and their pods' executors'
    (an executor ends a moment after its last task: polled until equal, or a violation)."""
    deadline = time.monotonic() + 60
    while True:
        expected = check.expected_use([records(history, f) for f in frameworks])
        state = await asyncio.to_thread(http_json, f"{cluster.master_url}/state")
        used = {a["id"]: {k: round(a["used_resources"].get(k, 0.0), 3) for k in ("cpus", "mem")}
                for a in state.get("slaves", [])}  # fmt: skip
        want = {a: {k: round(expected.get(a, {}).get(k, 0.0), 3) for k in ("cpus", "mem")} for a in used}
        if used == want and set(expected) <= set(used):
            return []
        if time.monotonic() > deadline:
            executors = sorted(f"{e['executor_id']} on {e['slave_id']}" for f in state.get("frameworks", [])
                               for e in f.get("executors", []))  # fmt: skip
            live = sorted(f"{t} on {r.updates[-1].data['agent_id']}" for f in frameworks
                          for t, r in records(history, f).items() if r.live())  # fmt: skip
            return [f"master's used resources {used} != live tasks' {want}; "
                    f"the master's executors: {executors}; live tasks: {live}"]  # fmt: skip
        await asyncio.sleep(0.5)


async def kill_all(history: History, framework: RecordingFramework) -> list[str]:
    live = [t for t, r in records(history, framework).items() if r.live()]
    for task_id in live:
        await framework.kill(task_id)
    try:
        await framework.until(lambda: all(records(history, framework)[t].last() in TERMINAL_STATES
                                          for t in live), SETTLE_TIMEOUT, "every task killed")  # fmt: skip
    except FrameworkError:
        left = {t: records(history, framework)[t].states() for t in live}
        return [f"{framework.info['name']}: KILL did not end every task within {SETTLE_TIMEOUT}s: {left}"]
    # The acknowledgements of the last updates, still in flight: they end on their
    # own, each one call; a minute at most.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(framework.acknowledged(), 60)
    return []


async def probe_pulls(
    cluster: Cluster, history: History, frameworks: list[RecordingFramework], images: list[str]
) -> list[str]:
    """One pod per agent with a task of each image (`exit 0`), through whichever framework
    holds an offer of it: each must finish, whatever pulls of it the registry's faults cut
    short before. A pod dropped for an offer no longer valid is launched again."""
    if not images:
        return []
    agents = {a["id"] for a in (await asyncio.to_thread(http_json, f"{cluster.master_url}/slaves"))["slaves"]}
    bad: dict[str, object] = {}
    for agent in sorted(agents):
        for attempt in range(PROBE_ATTEMPTS):
            probes = await _probe(history, frameworks, images, agent, attempt)
            if isinstance(probes, str):
                return [f"image probe: {probes}"]
            ended = {t: records(history, f)[t] for f, t in probes}
            reasons = [r.updates[-1].data["reason"] if r.updates else None for r in ended.values()]
            if reasons.count(INVALID_OFFERS) < len(ended):  # launched: done
                break
        bad.update({t: (r.states(), r.updates[-1].data.get("message") if r.updates else None)
                    for t, r in ended.items() if r.last() != "TASK_FINISHED"})  # fmt: skip
    return [f"image probe: a pull once the registry was back did not run: {bad}"] if bad else []


async def _probe(
    history: History, frameworks: list[RecordingFramework], images: list[str], agent: str, attempt: int
) -> list[tuple[RecordingFramework, str]] | str:
    """Launches the probe pod on `agent` and waits until its tasks ended; the (framework,
    task id) of each, or what kept it from launching."""
    need = {"cpus": (len(images) + 1) * 0.1, "mem": (len(images) + 1) * 32.0}

    def fits(offer: Json) -> bool:
        have = {r["name"]: r.get("scalar", {}).get("value", 0.0) for r in offer["resources"]}
        return offer["agent_id"]["value"] == agent and all(have.get(k, 0.0) >= v for k, v in need.items())

    deadline = time.monotonic() + 60
    while True:
        held = [(f, o) for f in frameworks for o in f.offers if fits(o)]
        if held:
            break
        if time.monotonic() > deadline:
            return f"no offer of agent {agent} for {need} within 60s"
        await asyncio.sleep(0.2)
    framework, offer = held[0]
    framework.offers.remove(offer)
    executor: Json = {"type": "DEFAULT", "executor_id": {"value": f"probe-{agent[-8:]}-{attempt}"},
                      "resources": [scalar(k, v) for k, v in EXECUTOR_RESOURCES.items()]}  # fmt: skip
    tasks = [task_info("probe", "exit 0", image) for image in images]
    probes = [(framework, t["task_id"]["value"]) for t in tasks]
    await framework.launch_group(offer, executor, tasks)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        ended = all(records(history, f)[t].last() in TERMINAL_STATES for f, t in probes)
        if ended or time.monotonic() > deadline:
            return probes
        await asyncio.sleep(0.5)
