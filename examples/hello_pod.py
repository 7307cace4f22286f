#!/usr/bin/env python3
"""The main job: a local Mesilla cluster runs an example workload, with visible progress.

Starts `mesilla local` (one master, one agent on 127.0.0.1), subscribes as a
framework through the v1 scheduler API, launches a command task and then a pod
(LAUNCH_GROUP: two tasks sharing a volume on the default executor), prints
every offer and status update as it arrives, shows what the tasks wrote, and
stops the cluster.

    python examples/hello_pod.py [--work_dir=DIR] [--command-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

from mesilla.common.recordio import Decoder
from mesilla.testing.cluster import LocalCluster

TERMINAL = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE"}
START = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - START:6.2f}s] {text}", flush=True)


def scalar(name: str, value: float) -> dict:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


class Framework:
    def __init__(self, master: str, plan: list[str]) -> None:
        self.url = f"http://{master}/api/v1/scheduler"
        self.plan = plan  # "command" and/or "pod", launched one per offer
        self.framework_id: dict | None = None
        self.stream_id = ""
        self.session: aiohttp.ClientSession | None = None
        self.states: dict[str, str] = {}
        self.sandboxes: dict[str, str] = {}
        self.done = asyncio.Event()

    async def call(self, body: dict) -> None:
        assert self.session is not None
        body = {"framework_id": self.framework_id, **body}
        async with self.session.post(self.url, json=body, headers={"Mesos-Stream-Id": self.stream_id}) as resp:
            if resp.status != 202:
                raise RuntimeError(f"{body['type']} answered {resp.status}: {await resp.text()}")

    async def run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as self.session:
            subscribe = {
                "type": "SUBSCRIBE",
                "subscribe": {"framework_info": {"user": "root", "name": "hello-pod", "checkpoint": True}},
            }
            async with self.session.post(self.url, json=subscribe) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"SUBSCRIBE answered {resp.status}: {await resp.text()}")
                self.stream_id = resp.headers["Mesos-Stream-Id"]
                decoder = Decoder()
                async for chunk in resp.content.iter_any():
                    for record in decoder.feed(chunk):
                        await self.handle(json.loads(record))
                    if self.done.is_set():
                        break
            await self.call({"type": "TEARDOWN"})

    async def handle(self, event: dict) -> None:
        kind = event["type"]
        if kind == "SUBSCRIBED":
            self.framework_id = event["subscribed"]["framework_id"]
            say(f"subscribed as framework {self.framework_id['value']}")
        elif kind == "OFFERS":
            for offer in event["offers"]["offers"]:
                await self.offer(offer)
        elif kind == "UPDATE":
            status = event["update"]["status"]
            task = status["task_id"]["value"]
            self.states[task] = status["state"]
            extra = f" ({status['message']})" if status.get("message") else ""
            say(f"task {task}: {status['state']}{extra}")
            if "uuid" in status:
                await self.call({"type": "ACKNOWLEDGE", "acknowledge": {
                    "agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]}})
            if not self.plan and self.states and all(s in TERMINAL for s in self.states.values()):
                self.done.set()
        elif kind == "ERROR":
            raise RuntimeError(f"master sent ERROR: {event['error']['message']}")

    async def offer(self, offer: dict) -> None:
        if not self.plan:
            await self.call({"type": "DECLINE", "decline": {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 3600}}})
            return
        kind = self.plan.pop(0)
        resources = {r["name"]: r.get("scalar", {}).get("value") for r in offer["resources"]}
        say(f"offer {offer['id']['value']} from {offer['hostname']}: cpus={resources.get('cpus')} mem={resources.get('mem')}")
        suffix = uuid.uuid4().hex[:6]
        if kind == "command":
            task = {
                "name": "hello", "task_id": {"value": f"hello-{suffix}"}, "agent_id": offer["agent_id"],
                "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
                "command": {"value": "echo hello from a Mesilla command task; uname -a; sleep 1"},
            }
            launched = [task]
            operation = {"type": "LAUNCH", "launch": {"task_infos": launched}}
            say(f"launching command task {task['task_id']['value']}")
        else:
            volume = {"container_path": "shared", "mode": "RW",
                      "source": {"type": "SANDBOX_PATH", "sandbox_path": {"type": "PARENT", "path": "shared"}}}
            writer = {
                "name": "writer", "task_id": {"value": f"writer-{suffix}"}, "agent_id": offer["agent_id"],
                "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
                "command": {"value": "for i in 1 2 3; do echo line $i >> shared/log; sleep 0.3; done"},
                "container": {"type": "MESOS", "volumes": [volume]},
            }
            reader = {
                "name": "reader", "task_id": {"value": f"reader-{suffix}"}, "agent_id": offer["agent_id"],
                "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
                # Waits for the writer's three lines: the two start at about, not exactly, the same time.
                "command": {"value": "until [ $(cat shared/log 2>/dev/null | wc -l) -ge 3 ]; do sleep 0.2; done; "
                                     "echo the writer wrote:; cat shared/log"},
                "container": {"type": "MESOS", "volumes": [volume]},
            }
            executor = {
                "type": "DEFAULT", "executor_id": {"value": f"pod-{suffix}"},
                "framework_id": self.framework_id,
                "resources": [scalar("cpus", 0.1), scalar("mem", 32), scalar("disk", 10)],
            }
            launched = [writer, reader]
            operation = {"type": "LAUNCH_GROUP",
                         "launch_group": {"executor": executor, "task_group": {"tasks": launched}}}
            say(f"launching pod {executor['executor_id']['value']} (writer + reader sharing a volume)")
        # Pending until their first update: else one task's end could look like everyone's.
        for launched_task in launched:
            self.states[launched_task["task_id"]["value"]] = "TASK_STAGING"
        await self.call({"type": "ACCEPT", "accept": {"offer_ids": [offer["id"]], "operations": [operation],
                                                      "filters": {"refuse_seconds": 1}}})


def show_sandboxes(work_dir: Path) -> None:
    for stdout in sorted(work_dir.glob("agent-*/slaves/*/frameworks/*/executors/*/runs/latest/**/stdout")):
        text = stdout.read_text(errors="replace").strip()
        if text:
            say(f"{stdout.relative_to(work_dir)}:\n    " + text.replace("\n", "\n    "))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--command-only", action="store_true", help="skip the pod")
    args = parser.parse_args()
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="mesilla-demo-"))
    # The pod's tasks share a SANDBOX_PATH volume, which the volume/sandbox_path
    # isolator provides; filesystem/linux gives each task its own mount namespace.
    isolation = "filesystem/linux,volume/sandbox_path,cgroups/cpu,cgroups/mem,namespaces/pid"
    cluster = LocalCluster(work_dir, extra_flags=[f"--isolation={isolation}"] if os.geteuid() == 0 else [])
    say(f"starting a local cluster in {work_dir} (log: {cluster.log_path})")
    try:
        await asyncio.to_thread(cluster.start)
        say(f"master at http://{cluster.master}, agent registered")
        framework = Framework(cluster.master, ["command"] if args.command_only else ["command", "pod"])
        await asyncio.wait_for(framework.run(), timeout=120)
        show_sandboxes(work_dir)
        failed = {t: s for t, s in framework.states.items() if s != "TASK_FINISHED"}
        say("all tasks finished" if not failed else f"tasks that did not finish: {failed}")
        return 1 if failed else 0
    finally:
        await asyncio.to_thread(cluster.stop)
        say("cluster stopped")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
