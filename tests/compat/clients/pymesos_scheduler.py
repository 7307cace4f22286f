"""A pymesos scheduler that the compatibility tests run in pymesos's own venv.

`pymesos_scheduler.py MODE` subscribes to $MASTER, launches on the first offer
and follows the tasks to their end; it prints "check passed" and exits 0, else
prints the reason and exits 1.

  launch: a command task `echo hello`: TASK_RUNNING, then TASK_FINISHED
  kill:   `sleep 600`, KILL once TASK_RUNNING: TASK_KILLED
  group:  LAUNCH_GROUP of two `echo hi` tasks on the DEFAULT executor, each TASK_FINISHED
  custom: a CUSTOM executor (pymesos_executor.py, pymesos's executor driver) that
          answers the task's data with a framework message, then TASK_FINISHED

This file runs under pymesos's interpreter (Python 3.11, no Mesilla): keep it stdlib + pymesos.
"""

import os
import sys
import threading
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
                                    "sleep 600" if self.mode == "kill" else "echo hello")
            self.want = {task["task_id"]["value"]: "TASK_KILLED" if self.mode == "kill" else "TASK_FINISHED"}
            driver.launchTasks(offer["id"], [task])

    def statusUpdate(self, driver: Any, status: Json) -> None:
        task_id, state = status["task_id"]["value"], status["state"]
        print(f"ok: {task_id} {state}", flush=True)
        if state == "TASK_RUNNING":
            self.running.add(task_id)
            if self.mode == "kill":
                driver.killTask(status["task_id"])
        elif state == self.want.get(task_id) and task_id in self.running:
            del self.want[task_id]
        elif state not in ("TASK_STAGING", "TASK_STARTING", "TASK_KILLING"):
            self.finish(f"task {task_id} ended {state}: {status.get('message')}")
        if not self.want and self.message is None:
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


def main() -> None:
    check = Check(sys.argv[1])
    framework = {"user": "root", "name": f"compat pymesos {check.mode}", "hostname": "localhost"}
    driver = MesosSchedulerDriver(check, framework, os.environ["MASTER"], use_addict=False)
    driver.start()
    if not check.done.wait(90):
        check.failure = f"timed out awaiting {check.want} (message {check.message!r})"
    driver.stop()
    driver.join()
    if check.failure:
        print(f"FAIL: {check.failure}")
        sys.exit(1)
    print(f"ok: pymesos check passed (mode={check.mode})")


if __name__ == "__main__":
    main()
