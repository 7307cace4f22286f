"""A pymesos scheduler that the compatibility tests run in pymesos's own venv.

`pymesos_scheduler.py MODE` subscribes to $MASTER, launches on the first offer
and follows the tasks to their end; it prints "check passed" and exits 0, else
prints the reason and exits 1.

  launch: a command task `echo hello`: TASK_RUNNING, then TASK_FINISHED
  kill:   `sleep 600`, KILL once TASK_RUNNING: TASK_KILLED
  group:  LAUNCH_GROUP of two `echo hi` tasks on the DEFAULT executor, each TASK_FINISHED
  custom: a CUSTOM executor (pymesos_executor.py, pymesos's executor driver) that
          answers the task's data with a framework message, then TASK_FINISHED
  agent_lost: `sleep 600`; once TASK_RUNNING the operator marks its agent gone (MARK_AGENT_GONE):
          TASK_LOST, and pymesos calls `slaveLost` with the agent (FAILURE without an executor)

This file runs under pymesos's interpreter (Python 3.11, no Mesilla): keep it stdlib + pymesos.
"""

import json
import os
import sys
import threading
import urllib.request
from typing import Any

from pymesos import (  # type: ignore[import-not-found]  # pymesos's own venv has it
    MesosSchedulerDriver,
    Scheduler,
    decode_data,
    encode_data,
)

Json = dict[str, Any]

HERE = os.path.dirname(os.path.abspath(__file__))


def resources(cpus: float, mem: float, disk: float = 0) -> list[Json]:
    amounts = {"cpus": cpus, "mem": mem, "disk": disk}
    return [{"name": name, "type": "SCALAR", "scalar": {"value": value}}
            for name, value in amounts.items() if value]


def command_task(task_id: str, agent_id: Json, command: str) -> Json:
    return {"name": task_id, "task_id": {"value": task_id}, "agent_id": agent_id,
            "resources": resources(0.1, 32), "command": {"value": command, "shell": True}}


class Check(Scheduler):  # type: ignore[misc]  # pymesos is untyped
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.launched = False
        self.running: set[str] = set()
        self.want: dict[str, str] = {}  # task id -> the state it must end in
        self.message: str | None = None
        self.lost_agent: Json | None = None  # the agent `slaveLost` must name (mode agent_lost)
        self.failure: str | None = None
        self.done = threading.Event()

    def finish(self, failure: str | None = None) -> None:
        self.failure = failure
        self.done.set()

    def resourceOffers(self, driver: Any, offers: list[Json]) -> None:
        for offer in offers:
            if self.launched:
                driver.declineOffer(offer["id"], {"refuse_seconds": 3600})
                continue
            self.launched = True
            agent = offer["agent_id"]
            if self.mode == "group":
                executor = {"type": "DEFAULT", "executor_id": {"value": "pymesos-group"},
                            "framework_id": offer["framework_id"], "resources": resources(0.1, 32, 10)}
                tasks = [command_task(f"pymesos-group-{i}", agent, "echo hi") for i in range(2)]
                self.want = {t["task_id"]["value"]: "TASK_FINISHED" for t in tasks}
                driver.acceptOffers([offer["id"]], [{"type": "LAUNCH_GROUP", "launch_group": {
                    "executor": executor, "task_group": {"tasks": tasks}}}])
                continue
            if self.mode == "custom":
                executor = {"executor_id": {"value": "pymesos-custom"}, "resources": resources(0.1, 32),
                            "command": {"value": f"{sys.executable} {HERE}/pymesos_executor.py"}}
                task = {"name": "pymesos-custom", "task_id": {"value": "pymesos-custom"}, "agent_id": agent,
                        "resources": resources(0.1, 32), "data": encode_data(b"compat-data"),
                        "executor": executor}
                self.message = "hello pymesos-custom compat-data"
            else:
                task = command_task(f"pymesos-{self.mode}", agent,
                                    "echo hello" if self.mode == "launch" else "sleep 600")
            end = {"kill": "TASK_KILLED", "agent_lost": "TASK_LOST"}.get(self.mode, "TASK_FINISHED")
            self.want = {task["task_id"]["value"]: end}
            if self.mode == "agent_lost":
                self.lost_agent = agent
            driver.launchTasks(offer["id"], [task])

    def statusUpdate(self, driver: Any, status: Json) -> None:
        task_id, state = status["task_id"]["value"], status["state"]
        print(f"ok: {task_id} {state}", flush=True)
        if state == "TASK_RUNNING":
            self.running.add(task_id)
            if self.mode == "kill":
                driver.killTask(status["task_id"])
            if self.mode == "agent_lost":
                mark_gone(status["agent_id"])
        elif state == self.want.get(task_id) and task_id in self.running:
            del self.want[task_id]
        elif state not in ("TASK_STAGING", "TASK_STARTING", "TASK_KILLING"):
            self.finish(f"task {task_id} ended {state}: {status.get('message')}")
        if not self.want and self.message is None and self.lost_agent is None:
            self.finish()

    def slaveLost(self, driver: Any, agent_id: Json) -> None:
        print(f"ok: slaveLost {agent_id}", flush=True)
        if agent_id != self.lost_agent:
            self.finish(f"slaveLost {agent_id}, want {self.lost_agent}")
        self.lost_agent = None
        if not self.want:
            self.finish()

    def frameworkMessage(self, driver: Any, executor_id: Json, agent_id: Json, message: str) -> None:
        text = decode_data(message).decode()
        print(f"ok: framework message {text!r}", flush=True)
        if text != self.message:
            self.finish(f"framework message {text!r}, want {self.message!r}")
        self.message = None
        if not self.want:
            self.finish()

    def error(self, driver: Any, message: str) -> None:
        self.finish(f"ERROR event: {message}")


def mark_gone(agent_id: Json) -> None:
    """The operator's MARK_AGENT_GONE, from another thread: pymesos's callbacks hold its loop."""
    call = json.dumps({"type": "MARK_AGENT_GONE", "mark_agent_gone": {"agent_id": agent_id}}).encode()
    request = urllib.request.Request(f"http://{os.environ['MASTER']}/api/v1", data=call,
                                     headers={"Content-Type": "application/json"})

    def post() -> None:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    threading.Thread(target=post, daemon=True).start()


def main() -> None:
    check = Check(sys.argv[1])
    framework = {"user": "root", "name": f"compat pymesos {check.mode}", "hostname": "localhost"}
    driver = MesosSchedulerDriver(check, framework, os.environ["MASTER"], use_addict=False)
    driver.start()
    if not check.done.wait(90):
        check.failure = (f"timed out awaiting {check.want} (message {check.message!r}, "
                         f"lost agent {check.lost_agent})")
    driver.stop()
    driver.join()
    if check.failure:
        print(f"FAIL: {check.failure}")
        sys.exit(1)
    print(f"ok: pymesos check passed (mode={check.mode})")


if __name__ == "__main__":
    main()
