"""Mesos's guarantees, judged over a `History` once the cluster is quiet.

Per framework and task, from the updates it read (a resent update, same uuid,
counts once; answers to reconciliation are not updates):
- a task whose ACCEPT was answered 202 ends in exactly one terminal state; one
  that never reached an agent may instead be unknown to the master (it died with
  the launch), which RECONCILE then says (TASK_UNKNOWN), having never run; so may
  one last heard TASK_UNREACHABLE from a master that then failed over (`forgotten`);
- a task of an ACCEPT answered 4xx never gets an update;
- no update after the terminal one;
- every terminal update that carries a uuid was acknowledged (a 202 ACKNOWLEDGE);
- RECONCILE agrees with the last state seen (implicit: every live task, and only
  those; explicit: every task);
- a terminal update the agent or the master made (not the executor) says why
  (a reason);
- the tasks of an executor hung across its agent's restart (the executor_hang
  fault) end with REASON_EXECUTOR_REREGISTRATION_TIMEOUT, unless their end was
  sent before it hung.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mesilla.testing.chaos.history import ACCEPTED, UNREACHED, Event, History
from mesilla.testing.chaos.load import LONG_COMMAND
from mesilla.testing.scheduler import TERMINAL_STATES, Json

# What a master says of a task it does not know (to a PARTITION_AWARE framework: TASK_UNKNOWN).
UNKNOWN_STATES = frozenset({"TASK_UNKNOWN", "TASK_LOST", "TASK_GONE", "TASK_DROPPED"})
RECONCILIATION = "REASON_RECONCILIATION"
HUNG = "REASON_EXECUTOR_REREGISTRATION_TIMEOUT"


@dataclass
class TaskRecord:
    task_id: str
    accept: str  # the ACCEPT's outcome: "202", "unreached", or a status
    resources: list[Json]
    executor: Json | None  # a pod's executor
    long: bool  # runs until killed (the load's other tasks end on their own within seconds)
    updates: list[Event] = field(default_factory=list)  # distinct, in order
    answers: list[Event] = field(default_factory=list)  # reconciliation answers
    # Last heard TASK_UNREACHABLE, then the master failed over: as in Mesos, the
    # registry keeps no unreachable tasks, so if the agent comes back without it
    # (it never received the launch) no one can tell of its end but RECONCILE.
    forgotten: bool = False

    def states(self) -> list[str]:
        return [u.data["state"] for u in self.updates]

    def last(self) -> str | None:
        return self.updates[-1].data["state"] if self.updates else None

    def terminal(self) -> list[Event]:
        return [u for u in self.updates if u.data["state"] in TERMINAL_STATES]

    def executor_id(self) -> str:
        """Its executor's id: its pod's, or (a command task's executor) its own."""
        return self.executor["executor_id"]["value"] if self.executor is not None else self.task_id

    def live(self) -> bool:
        """Known to the framework as running somewhere (an update, not terminal, not forgotten)."""
        last = self.last()
        return last is not None and last not in TERMINAL_STATES and not self.forgotten


def launched_tasks(history: History, source: str) -> dict[str, TaskRecord]:
    """The tasks of every ACCEPT the framework sent, with what it read of each."""
    tasks: dict[str, TaskRecord] = {}
    for event in history.of(source, "call"):
        if event.data["type"] != "ACCEPT":
            continue
        for operation in event.data["payload"]["operations"]:
            if operation["type"] == "LAUNCH":
                infos, executor = operation["launch"]["task_infos"], None
            elif operation["type"] == "LAUNCH_GROUP":
                group = operation["launch_group"]
                infos, executor = group["task_group"]["tasks"], group["executor"]
            else:
                continue
            for info in infos:
                task_id = info["task_id"]["value"]
                long = info["command"]["value"] == LONG_COMMAND
                tasks[task_id] = TaskRecord(task_id, event.data["outcome"], info["resources"], executor, long)
    answering = False
    seen: set[str] = set()
    failovers: list[int] = []  # where in the history the master was killed
    last_news: dict[str, int] = {}  # task id -> where in the history its last update is
    for i, event in enumerate(history.events):
        if event.source == "chaos" and event.kind == "note" and event.data.get("reconcile") == source:
            answering = True  # answers from here on are to our RECONCILE
        if event.source == "chaos" and event.kind == "fault" and event.data["kind"] == "master_kill":
            failovers.append(i)
        if event.source != source or event.kind != "update":
            continue
        record = tasks.get(event.data["task_id"])
        if record is None:
            record = TaskRecord(event.data["task_id"], "never sent", [], None, False)
            tasks[record.task_id] = record
        uuid = event.data["uuid"]
        if uuid is None and event.data["reason"] == RECONCILIATION:
            if answering:
                record.answers.append(event)
            # else: the answer to a KILL of a task the master does not know, not news
        elif uuid is None or uuid not in seen:
            if uuid is not None:
                seen.add(uuid)
            record.updates.append(event)
            last_news[record.task_id] = i
    for record in tasks.values():
        record.forgotten = record.last() == "TASK_UNREACHABLE" and any(
            i > last_news[record.task_id] for i in failovers)  # fmt: skip
    return tasks


def acknowledged(history: History, source: str) -> set[str]:
    return {
        e.data["payload"]["uuid"] for e in history.of(source, "call")
        if e.data["type"] == "ACKNOWLEDGE" and e.data["outcome"] == ACCEPTED
    }  # fmt: skip


def check_tasks(history: History, source: str) -> list[str]:
    """The per-task guarantees; run after the quiet phase killed every live task."""
    violations = []
    acks = acknowledged(history, source)
    for task_id, record in launched_tasks(history, source).items():
        where = f"{source} task {task_id} ({record.accept}): states {record.states()}"
        ends = record.terminal()
        if record.accept not in (ACCEPTED, UNREACHED):
            if record.updates:
                violations.append(f"{where}: updates for a task whose ACCEPT was refused")
            continue
        if not ends:
            answer = record.answers[-1].data["state"] if record.answers else None
            if (record.updates and not record.forgotten) or answer not in UNKNOWN_STATES:
                violations.append(f"{where}: no terminal update (last RECONCILE answer: {answer})")
        if len(ends) > 1:
            violations.append(f"{where}: {len(ends)} terminal updates " + ", ".join(
                f"{e.data['state']} uuid {e.data['uuid']} at +{e.at}s" for e in ends))  # fmt: skip
        if ends:
            after = record.updates[record.updates.index(ends[0]) + 1:]
            if any(u.data["state"] not in TERMINAL_STATES for u in after):
                violations.append(f"{where}: a non-terminal update after {ends[0].data['state']}")
            for end in ends:
                uuid = end.data["uuid"]
                if uuid is not None and uuid not in acks:
                    violations.append(f"{where}: {end.data['state']} (uuid {uuid}) never acknowledged")
                if end.data["source"] != "SOURCE_EXECUTOR" and not end.data["reason"]:
                    what = f"{end.data['state']} from {end.data['source']}"
                    violations.append(f"{where}: {what} without a reason")
    return violations + check_hung(history, source)


def check_hung(history: History, source: str) -> list[str]:
    """The executor_hang faults: each hung executor's tasks that had not ended by then end
    with REASON_EXECUTOR_REREGISTRATION_TIMEOUT, or with an end its executor sent before
    it hung (delivered once its agent was back)."""
    violations = []
    tasks = launched_tasks(history, source)
    where = {id(e): i for i, e in enumerate(history.events)}  # the order (timestamps may tie)
    ends = {e.data["executor_id"]: where[id(e)] for e in history.of("chaos", "unhung")}
    for hung in history.of("chaos", "hung"):
        executor_id = hung.data["executor_id"]
        for record in tasks.values():
            terminal = record.terminal()
            if record.executor_id() != executor_id or not terminal:
                continue
            at = where[id(terminal[0])]
            if at < where[id(hung)]:
                continue  # it had ended
            end = terminal[0].data
            sent_before = end["source"] == "SOURCE_EXECUTOR" and at < ends.get(executor_id, 0)
            if end["reason"] != HUNG and not sent_before:
                violations.append(f"{source} task {record.task_id} of executor {executor_id}, hung at "
                                  f"+{hung.at}s: ended {end['state']} ({end['reason']}: {end['message']}) "
                                  f"at +{terminal[0].at}s, not for the hang")  # fmt: skip
    return violations


def check_reconciliation(
    before: dict[str, TaskRecord], after: dict[str, TaskRecord], implicit_ids: set[str]
) -> list[str]:
    """`before`: the records when the implicit RECONCILE went; `after`: with the answers to
    it and to the explicit RECONCILE of every task that followed; `implicit_ids` those the
    implicit one answered."""
    violations = []
    for task_id, record in after.items():
        last = before[task_id].last() if task_id in before else None
        live = task_id in before and before[task_id].live()
        if live and task_id not in implicit_ids:
            violations.append(f"task {task_id} ({last}): no answer to the implicit RECONCILE")
        if not live and task_id in implicit_ids:
            violations.append(f"task {task_id} (last seen {last}): answered by the implicit RECONCILE, "
                              f"as {[a.data['state'] for a in record.answers]}")  # fmt: skip
        if record.accept not in (ACCEPTED, UNREACHED):
            continue
        answers = [a.data["state"] for a in record.answers]
        if not answers:
            violations.append(f"task {task_id} (last seen {last}): no answer to the explicit RECONCILE")
        elif live and any(a != last for a in answers):
            violations.append(f"task {task_id}: last seen {last}, RECONCILE answered {answers}")
        elif not live and any(a not in TERMINAL_STATES | UNKNOWN_STATES for a in answers):
            violations.append(f"task {task_id}: last seen {last}, RECONCILE answered {answers}: "
                              "it runs unseen")  # fmt: skip
    return violations


def expected_use(records: list[dict[str, TaskRecord]]) -> dict[str, dict[str, float]]:
    """agent id -> cpus and mem the live tasks (last state not terminal) and their pods'
    executors use, from the ACCEPTs."""
    use: dict[str, dict[str, float]] = {}
    pods: set[tuple[str, str]] = set()

    def add(agent: str, resources: list[Json]) -> None:
        for r in resources:
            if r["name"] in ("cpus", "mem"):
                use.setdefault(agent, {"cpus": 0.0, "mem": 0.0})[r["name"]] += r["scalar"]["value"]

    for tasks in records:
        for record in tasks.values():
            if not record.live():
                continue
            agent = record.updates[-1].data["agent_id"]
            add(agent, record.resources)
            if record.executor is not None and (agent, record.executor["executor_id"]["value"]) not in pods:
                pods.add((agent, record.executor["executor_id"]["value"]))
                add(agent, record.executor["resources"])
    return use
