"""The default executor: runs task groups (pods) as nested containers of its own container.

Started by the agent for DEFAULT executors as ``python -m mesilla.executor.default``
with the Mesos executor environment. It subscribes through
`mesilla.executor.driver`, keeps every decision in the pure state machine
`mesilla.executor.default_state`, and carries out that machine's instructions
here: agent API calls (`mesilla.executor.agent_client`), status updates (sent
in order by one sender task), timers, sandbox links and checks.

It is one process per pod, so it imports only the standard library and
Mesilla's light executor modules (no aiohttp, no msgspec).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import uuid
from typing import TYPE_CHECKING, Any

from mesilla.common.tasks import TaskOwner
from mesilla.executor import default_events as events
from mesilla.executor.agent_client import AgentCallError, AgentClient
from mesilla.executor.default_launch import (
    container_ip,
    hand_over_sandbox,
    launch_container_body,
    link_task_sandbox,
)
from mesilla.executor.default_state import (
    ExecutorState,
)
from mesilla.executor.driver import Executor, ExecutorDriver

if TYPE_CHECKING:
    from mesilla.executor.checks import Checker

log = logging.getLogger("mesilla.executor.default")

Json = dict[str, Any]

# Mesos's default executor waits at most this long for its last acknowledgements.
ACKNOWLEDGEMENT_TIMEOUT = 60.0


class DefaultExecutor(Executor):
    def __init__(self, sandbox: str, *, ack_timeout: float = ACKNOWLEDGEMENT_TIMEOUT) -> None:
        self.sandbox = sandbox
        self._agent: AgentClient | None = None
        self.ack_timeout = ack_timeout
        self.machine: ExecutorState | None = None
        self.driver: ExecutorDriver | None = None
        self._ip: str | None = None
        self._timers: dict[events.Timer, asyncio.TimerHandle] = {}
        self._checkers: dict[str, list[Checker]] = {}
        # What each checked task asked for, to restart its checks after a disconnection.
        self._checked: dict[str, events.StartChecks] = {}
        # Every step of the machine's instructions, and the update sender.
        self._tasks = TaskOwner("the default executor")
        self._updates: asyncio.Queue[Json] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self._acknowledged = asyncio.Event()

    # --- driver callbacks -------------------------------------------------------------

    @property
    def agent(self) -> AgentClient:
        assert self._agent is not None, "the agent client exists from SUBSCRIBED on"
        return self._agent

    async def subscribed(self, driver: ExecutorDriver, event: Json) -> None:
        self.driver = driver
        if self._agent is None:
            # The agent API lives at the same endpoint, with the same token.
            self._agent = AgentClient(
                driver.host, driver.port, driver.auth_headers, driver.unix_socket, subscription=driver
            )
        if self._sender is None:
            self._sender = self._tasks.spawn(self._send_updates(), "update sender")
        if self.machine is None:
            self.machine = ExecutorState(
                executor_id=driver.executor_id, new_container_value=lambda: str(uuid.uuid4())
            )
        capabilities = frozenset(c.get("type", "") for c in driver.framework_info.get("capabilities", []))
        container_id = event.get("container_id")
        if container_id is None:
            log.error("SUBSCRIBED carries no container_id: cannot name nested containers; shutting down")
            driver.stop()
            return
        self.feed(events.Subscribed(container_id, capabilities))
        for task_id, start in self._checked.items():
            if task_id in self._checkers:
                for checker in self._checkers[task_id]:
                    checker.start()  # resumed after a disconnection
            else:
                self._start_checks(start)

    async def launch(self, driver: ExecutorDriver, task: Json) -> None:
        # As Mesos: LAUNCH never goes to the default executor; treat it as fatal.
        log.error(
            "LAUNCH of task '%s' is not supported by the default executor (use LAUNCH_GROUP); shutting down",
            task.get("task_id", {}).get("value"),
        )
        self.feed(events.Shutdown())

    async def launch_group(self, driver: ExecutorDriver, task_group: Json) -> None:
        self.feed(events.LaunchGroup(list(task_group.get("tasks", []))))

    async def kill(self, driver: ExecutorDriver, task_id: str, kill_policy: Json | None) -> None:
        self.feed(events.KillTask(task_id, kill_policy))

    async def acknowledged(self, driver: ExecutorDriver, task_id: str, uuid: str) -> None:
        self._acknowledged.set()

    async def disconnected(self, driver: ExecutorDriver) -> None:
        # As Mesos: no checking while the agent is away, so a restarting agent
        # never gets a task killed for failures nobody could report. The checkers
        # are paused, not replaced, so that they resume with what they reported.
        for checkers in self._checkers.values():
            for checker in checkers:
                checker.pause()

    async def shutdown(self, driver: ExecutorDriver) -> None:
        self.feed(events.Shutdown())

    async def error(self, driver: ExecutorDriver, message: str) -> None:
        log.error("ERROR event from the agent: %s", message)

    # --- the machine ----------------------------------------------------------------------

    def feed(self, event: events.Event) -> None:
        if self.machine is None:
            log.warning("Dropping %s received before SUBSCRIBED", type(event).__name__)
            return
        for instruction in self.machine.handle(event):
            self._execute(instruction)

    def _execute(self, instruction: events.Instruction) -> None:
        match instruction:
            case events.SendUpdate():
                status = instruction.status
                log.info(
                    "Task '%s' %s%s",
                    status["task_id"]["value"],
                    status["state"],
                    f": {status['message']}" if status.get("message") else "",
                )
                self._updates.put_nowait(status)
            case events.LaunchContainer():
                self._tasks.spawn(self._launch(instruction), f"launch of task '{instruction.task_id}'")
            case events.WaitContainer():
                self._tasks.spawn(self._wait(instruction), f"wait for task '{instruction.task_id}'")
            case events.KillContainer():
                self._tasks.spawn(self._kill(instruction), f"kill of task '{instruction.task_id}'")
            case events.StartTimer():
                self._cancel_timer(instruction.timer)
                handle = asyncio.get_running_loop().call_later(
                    instruction.delay, self._fire, instruction.timer
                )
                self._timers[instruction.timer] = handle
            case events.CancelTimer():
                self._cancel_timer(instruction.timer)
            case events.LinkSandbox():
                try:
                    link_task_sandbox(self.sandbox, instruction.task_id, instruction.container_id)
                except OSError as exc:
                    log.warning("Could not link the sandbox of task '%s': %s", instruction.task_id, exc)
            case events.StartChecks():
                self._checked[instruction.task_id] = instruction
                if self.driver is not None and self.driver.connected:
                    self._start_checks(instruction)
            case events.StopChecks():
                self._checked.pop(instruction.task_id, None)
                self._stop_checks(instruction.task_id)
            case events.Exit():
                if self.machine is not None and self.machine.abandoned:
                    log.error("A task group launch got no answer from the agent: exiting without further "
                              "updates; the agent's recovery ends the tasks")
                self._tasks.spawn(self._exit(), "exit")

    def _fire(self, timer: events.Timer) -> None:
        self._timers.pop(timer, None)
        self.feed(events.TimerFired(timer))

    def _cancel_timer(self, timer: events.Timer) -> None:
        handle = self._timers.pop(timer, None)
        if handle is not None:
            handle.cancel()

    # --- instructions with I/O -------------------------------------------------------

    async def _send_updates(self) -> None:
        # One sender keeps each task's updates in the order the machine made them.
        while True:
            status = await self._updates.get()
            try:
                assert self.driver is not None
                await self.driver.update(status)
            finally:
                self._updates.task_done()

    async def _launch(self, launch: events.LaunchContainer) -> None:
        if launch.reuse_sandbox_of is not None:
            hand_over_sandbox(self.sandbox, launch.reuse_sandbox_of, launch.container_id)
            try:
                await self.agent.remove_container(launch.reuse_sandbox_of)
            except (OSError, AgentCallError) as exc:
                log.warning("Could not remove the previous container of task '%s': %s", launch.task_id, exc)
        if self._ip is None:
            self._ip = container_ip(self.agent.endpoint.host)
        command, container, resources, limits = launch_container_body(launch.task, self._ip)
        error, agent_lost = None, False
        try:
            await self.agent.launch_container(launch.container_id, command, container, resources, limits)
        except AgentCallError as exc:
            error = str(exc)
        except OSError as exc:
            error, agent_lost = f"the agent could not be reached: {exc}", True
        if error:
            log.error("Launching task '%s' failed: %s", launch.task_id, error)
        self.feed(events.ContainerLaunched(launch.task_id, launch.container_id, error, agent_lost))

    async def _wait(self, wait: events.WaitContainer) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()  # WAIT starts right after the launch answered
        try:
            result = await self.agent.wait_container(wait.container_id)
        except AgentCallError as exc:
            result = {"message": str(exc)}
        self.feed(
            events.ContainerExited(
                wait.task_id,
                wait.container_id,
                exit_status=result.get("exit_status"),
                state=result.get("state"),
                reason=result.get("reason"),
                message=result.get("message"),
                limitation=result.get("limitation"),
                ran_for=loop.time() - started,
            )
        )

    async def _kill(self, kill: events.KillContainer) -> None:
        try:
            await self.agent.kill_container(kill.container_id, kill.signal)
        except (OSError, AgentCallError) as exc:
            # The escalation timer sends SIGKILL again; nothing else to do here.
            log.warning("Killing the container of task '%s' failed: %s", kill.task_id, exc)

    def _stop_checks(self, task_id: str) -> None:
        for checker in self._checkers.pop(task_id, []):
            self._tasks.spawn(checker.stop(), f"stop of the checks of task '{task_id}'")

    def _start_checks(self, start: events.StartChecks) -> None:
        # Imported on first use: most pods have no checks, and each pod's executor start counts.
        from mesilla.executor.checks import (
            Checker,
            InvalidCheck,
            parse_check,
            probe_for,
        )

        probe = probe_for(self.agent, start.container_id)
        checkers = []
        task_id = start.task_id
        for info, health in ((start.check, False), (start.health_check, True)):
            if not info:
                continue
            try:
                spec = parse_check(info, health=health)
            except InvalidCheck as exc:
                log.error("Task '%s' is not checked: %s", task_id, exc)
                continue
            if health:
                checker = Checker(
                    spec, probe, on_health=lambda ok, kill: self.feed(events.HealthUpdated(task_id, ok, kill))
                )
            else:
                checker = Checker(
                    spec, probe, on_check=lambda status: self.feed(events.CheckUpdated(task_id, status))
                )
            checker.start()
            checkers.append(checker)
        self._checkers[task_id] = checkers

    async def _exit(self) -> None:
        """Waits (bounded) until every update went out and was acknowledged, then stops the driver."""
        assert self.driver is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ack_timeout
        await self._updates.join()
        while self.driver.unacknowledged_updates and loop.time() < deadline:
            self._acknowledged.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._acknowledged.wait()
            except TimeoutError:
                log.warning("Exiting with %d unacknowledged updates", len(self.driver.unacknowledged_updates))
        self.driver.stop()

    async def close(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        for checkers in self._checkers.values():
            for checker in checkers:
                await checker.stop()
        await self._tasks.close()
        if self._agent is not None:
            await self._agent.close()


async def run(executor: DefaultExecutor, driver: ExecutorDriver) -> None:
    # SIGTERM from the agent (its shutdown grace period ran out) ends us quietly.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, driver.stop)
    try:
        await driver.run()
    finally:
        await executor.close()


def main() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    sandbox = os.environ.get("MESOS_SANDBOX") or os.environ.get("MESOS_DIRECTORY") or os.getcwd()
    executor = DefaultExecutor(sandbox)
    try:
        driver = ExecutorDriver(executor)
    except RuntimeError as exc:  # a missing MESOS_* variable
        log.error("%s", exc)
        sys.exit(1)
    asyncio.run(run(executor, driver))


if __name__ == "__main__":
    main()
