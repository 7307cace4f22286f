"""The command executor (`python -m mesilla.executor.command`), as Mesos's.

Runs the one task of a command task's executor: the task's command (`sh -c
value`, or the executable `value` with `arguments` as its argv) in its own
process group (inside the executor's session, so that destroying the executor
container takes the task down too), with the task's environment on top of the
executor's and the sandbox as working directory. It reports TASK_STARTING,
TASK_RUNNING, then TASK_FINISHED / TASK_FAILED / TASK_KILLED with Mesos's
messages; KILL sends SIGTERM to the task's group and SIGKILL after the grace
period (KILL's kill_policy, else the task's, else 3 s), with TASK_KILLING first
when the framework has the TASK_KILLING_STATE capability. The executor exits
once its terminal update is acknowledged (or after a bounded wait).

The task's check and health check run from here (COMMAND where the task runs,
HTTP and TCP against 127.0.0.1); a task with an image runs pivoted into it, in
pid and mount namespaces of its own (`Options`, `task_rootfs.py`), while the
executor stays on the host, as in Mesos, out of the task's sight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import signal
import subprocess
import sys
from asyncio.subprocess import Process
from dataclasses import dataclass
from typing import Any

from mesilla.common.tasks import TaskOwner
from mesilla.containerizer.launcher.oci import capability_mask
from mesilla.executor import task_rootfs
from mesilla.executor.checks import (
    Checker,
    CheckSpec,
    InvalidCheck,
    ProbeResult,
    parse_check,
    run_probe,
)
from mesilla.executor.driver import Executor, ExecutorDriver

log = logging.getLogger("mesilla.executor.command")

DEFAULT_GRACE_PERIOD = 3.0
# How long the terminal update may wait for its acknowledgement before we exit anyway.
TERMINAL_ACK_TIMEOUT = 60.0


def grace_period(kill_policy: dict[str, Any] | None) -> float | None:
    if kill_policy and "grace_period" in kill_policy:
        return int(kill_policy["grace_period"].get("nanoseconds", 0)) / 1e9
    return None


def task_argv(command: dict[str, Any]) -> tuple[str, list[str]]:
    """The program and argv of a CommandInfo (argv[0] kept from `arguments`, as Mesos)."""
    value = command.get("value")
    if command.get("shell", True):
        if not value:
            raise ValueError("the task's shell command has no 'value'")
        return "/bin/sh", ["sh", "-c", value]
    if not value:
        raise ValueError("the task's command has no executable 'value'")
    return value, list(command.get("arguments") or [value])


def termination_message(returncode: int) -> str:
    if returncode < 0:
        name = signal.strsignal(-returncode) or f"signal {-returncode}"
        return f"Command terminated with signal {name}"
    return f"Command exited with status {returncode}"


@dataclass
class Options:
    """The flags the containerizer's isolators give a command task's executor (Mesos's names).

    For a command task with an image: `rootfs` (the task runs pivoted there),
    `sandbox_directory` (where it sees its sandbox), and from docker/runtime
    the image's `task_command`, `working_directory` and `task_environment` (JSON);
    `task_bounding_capabilities` (JSON, kernel names) the most the task may hold.
    """

    rootfs: str | None = None
    sandbox_directory: str = "/mnt/mesos/sandbox"
    working_directory: str | None = None
    user: str | None = None
    task_command: dict[str, Any] | None = None
    task_environment: dict[str, Any] | None = None
    task_bounding_capabilities: list[str] | None = None

    @classmethod
    def parse(cls, argv: list[str]) -> Options:
        options = cls()
        for arg in argv:
            name, sep, value = arg.removeprefix("--").partition("=")
            if not arg.startswith("--") or not sep or not hasattr(options, name):
                raise SystemExit(f"Unknown command executor argument '{arg}'")
            setattr(options, name, json.loads(value) if name.startswith("task_") else value)
        return options


def _variables(environment: dict[str, Any] | None) -> dict[str, str]:
    return {
        v["name"]: v["value"]
        for v in (environment or {}).get("variables", [])
        if v.get("type", "VALUE") == "VALUE" and "value" in v
    }


def task_rootfs_argv(
    options: Options, sandbox: str, account: pwd.struct_passwd | None, argv: list[str]
) -> list[str]:
    """The command line that starts `argv` in the task's rootfs (`task_rootfs.py`)."""
    assert options.rootfs is not None
    if not os.path.isdir(options.rootfs):
        raise FileNotFoundError(
            f"The task's rootfs '{options.rootfs}' is not visible to the executor"
        )
    spec: dict[str, Any] = {
        "rootfs": options.rootfs,
        "sandbox": sandbox,
        "sandbox_directory": options.sandbox_directory,
        "working_directory": options.working_directory,
    }
    if options.task_bounding_capabilities is not None:
        spec["bounding"] = capability_mask(options.task_bounding_capabilities)
    if account is not None:
        spec.update(user=account.pw_name, uid=account.pw_uid, gid=account.pw_gid)
    return [sys.executable, "-I", "-S", task_rootfs.__file__, json.dumps(spec), *argv]


class CommandExecutor(Executor):
    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        self.task: dict[str, Any] | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.killing = False
        self.shutting_down = False
        self.terminal_uuid: str | None = None
        self.checkers: list[Checker] = []
        self.killed_by_health_check = False
        self.done = asyncio.Event()  # the executor may exit
        self._tasks = TaskOwner("the command executor")

    async def close(self) -> None:
        for checker in self.checkers:  # they start tasks of their own
            await checker.stop()
        await self._tasks.close()

    def _status(
        self, driver: ExecutorDriver, state: str, task: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        task = task or self.task
        assert task is not None
        status: dict[str, Any] = {"task_id": task["task_id"], "state": state, **extra}
        if driver.container_id is not None:
            container_status = status.setdefault("container_status", {})
            container_status["container_id"] = driver.container_id
        return status

    async def launch(self, driver: ExecutorDriver, task: dict[str, Any]) -> None:
        if self.task is not None:
            # Mesos's command executor runs exactly one task.
            await driver.update(self._status(
                driver, "TASK_FAILED", task,
                message="Attempted to run multiple tasks using a \"command\" executor",
            ))  # fmt: skip
            return
        self.task = task
        await driver.update(self._status(driver, "TASK_STARTING"))
        command = self.options.task_command or task.get("command") or {}
        try:
            self.process = await self._exec(command, stdout=None)
        except (OSError, ValueError, subprocess.SubprocessError, KeyError) as exc:
            await self._finish(driver, "TASK_FAILED", f"Failed to launch the task: {exc}")
            return
        await driver.update(
            self._status(
                driver, "TASK_RUNNING",
                container_status={"executor_pid": os.getpid()},
            )
        )  # fmt: skip
        self._tasks.spawn(self._reap(driver), "reaper")
        self._start_checks(driver)

    async def _exec(self, command: dict[str, Any], stdout: int | None) -> Process:
        """Starts `command` where the task runs (environment, sandbox, rootfs, user),
        in a process group of its own."""
        options = self.options
        program, argv = task_argv(command)
        env = dict(os.environ)
        env.update(_variables(options.task_environment))
        env.update(_variables(command.get("environment")))
        sandbox = os.environ.get("MESOS_DIRECTORY") or os.getcwd()
        common: dict[str, Any] = {
            "env": env, "stdin": asyncio.subprocess.DEVNULL, "stdout": stdout,
            "stderr": stdout, "process_group": 0, "cwd": sandbox,
        }  # fmt: skip
        account = pwd.getpwnam(options.user) if options.user else None
        if options.rootfs:
            env["MESOS_SANDBOX"] = options.sandbox_directory
            helper = task_rootfs_argv(options, sandbox, account, [program, *argv[1:]])
            return await asyncio.create_subprocess_exec(*helper, **common)
        if account is not None and account.pw_uid != os.geteuid():
            # Its groups too: the executor's are root's.
            common.update(
                user=account.pw_uid,
                group=account.pw_gid,
                extra_groups=os.getgrouplist(account.pw_name, account.pw_gid),
            )
        return await asyncio.create_subprocess_exec(*argv, executable=program, **common)

    # --- checks and health checks (Mesos's `src/checks/`, run from the executor) ---

    def _start_checks(self, driver: ExecutorDriver) -> None:
        assert self.task is not None
        for field, health in (("check", False), ("health_check", True)):
            if not self.task.get(field):
                continue
            try:
                spec = parse_check(self.task[field], health=health)
            except InvalidCheck as exc:
                log.warning("Not running the task's %s: %s", field, exc)
                continue
            if health:
                checker = Checker(
                    spec, self._probe, on_health=lambda ok, kill: self._on_health(driver, ok, kill)
                )
            else:
                checker = Checker(
                    spec, self._probe,
                    on_check=lambda status: self._on_check(driver, status),
                )  # fmt: skip
            checker.start()
            self.checkers.append(checker)

    async def _probe(self, spec: CheckSpec) -> ProbeResult:
        return await run_probe(spec, self._command_probe)

    async def _command_probe(self, command: dict[str, Any], timeout: float | None) -> ProbeResult:
        """A COMMAND check runs as a child of this executor, in the task's environment."""
        try:
            process = await self._exec(command, stdout=asyncio.subprocess.DEVNULL)
        except (OSError, ValueError, subprocess.SubprocessError, KeyError) as exc:
            return ProbeResult(None, f"COMMAND check could not run: {exc}")
        try:
            async with asyncio.timeout(timeout):
                returncode = await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return ProbeResult(None, f"COMMAND check did not return within {timeout:g}s")
        if returncode < 0:
            return ProbeResult(None, f"COMMAND check {termination_message(returncode)}")
        return ProbeResult(returncode)

    async def _check_updated(self, driver: ExecutorDriver, check_status: dict[str, Any]) -> None:
        if not self.killing and self.terminal_uuid is None:
            await driver.update(self._status(
                driver, "TASK_RUNNING", reason="REASON_TASK_CHECK_STATUS_UPDATED",
                check_status=check_status,
            ))  # fmt: skip

    def _on_check(self, driver: ExecutorDriver, status: dict[str, Any]) -> None:
        self._tasks.spawn(self._check_updated(driver, status), "check status update")

    def _on_health(self, driver: ExecutorDriver, healthy: bool, kill: bool) -> None:
        # Decided here, not in the spawned update: later reports must see a kill coming.
        if self.killing or self.killed_by_health_check or self.terminal_uuid is not None:
            return
        self.killed_by_health_check = kill
        self._tasks.spawn(self._health_updated(driver, healthy, kill), "health status update")

    async def _health_updated(self, driver: ExecutorDriver, healthy: bool, kill: bool) -> None:
        await driver.update(self._status(
            driver, "TASK_RUNNING", reason="REASON_TASK_HEALTH_CHECK_STATUS_UPDATED",
            healthy=healthy,
        ))  # fmt: skip
        if kill:
            log.warning("Task failed its health check too often: killing it")
            assert self.task is not None
            grace = grace_period(self.task.get("kill_policy"))
            await self._kill(driver, DEFAULT_GRACE_PERIOD if grace is None else grace)

    async def _reap(self, driver: ExecutorDriver) -> None:
        assert self.process is not None
        returncode = await self.process.wait()
        for checker in self.checkers:
            await checker.stop()
        if self.killing:
            state = "TASK_KILLED"
        else:
            state = "TASK_FINISHED" if returncode == 0 else "TASK_FAILED"
        await self._finish(driver, state, termination_message(returncode))

    async def _finish(self, driver: ExecutorDriver, state: str, message: str) -> None:
        extra: dict[str, Any] = {"healthy": False} if self.killed_by_health_check else {}
        self.terminal_uuid = await driver.update(
            self._status(driver, state, message=message, **extra)
        )
        if driver.is_acknowledged(self.terminal_uuid):  # the ack beat the call's response
            self.done.set()
        else:
            self._tasks.spawn(self._exit_after_ack_timeout(), "acknowledgement timeout")

    async def _exit_after_ack_timeout(self) -> None:
        await asyncio.sleep(TERMINAL_ACK_TIMEOUT)
        log.warning("Terminal update not acknowledged within %gs: exiting", TERMINAL_ACK_TIMEOUT)
        self.done.set()

    async def acknowledged(self, driver: ExecutorDriver, task_id: str, uuid: str) -> None:
        if uuid == self.terminal_uuid:
            self.done.set()

    async def kill(
        self, driver: ExecutorDriver, task_id: str, kill_policy: dict[str, Any] | None
    ) -> None:
        if self.task is None or task_id != self.task["task_id"]["value"]:
            log.warning("Ignoring KILL of unknown task %s", task_id)
            return
        grace = grace_period(kill_policy)
        if grace is None:
            grace = grace_period(self.task.get("kill_policy"))
        await self._kill(driver, DEFAULT_GRACE_PERIOD if grace is None else grace)

    async def shutdown(self, driver: ExecutorDriver) -> None:
        self.shutting_down = True
        if self.process is None or self.process.returncode is not None:
            if self.terminal_uuid is None:
                self.done.set()
            return
        grace = grace_period(self.task.get("kill_policy") if self.task else None)
        grace = DEFAULT_GRACE_PERIOD if grace is None else grace
        await self._kill(driver, min(grace, driver.shutdown_grace_period))

    async def _kill(self, driver: ExecutorDriver, grace: float) -> None:
        if self.killing or self.process is None or self.process.returncode is not None:
            return  # a second KILL while killing changes nothing
        self.killing = True
        if driver.framework_has_capability("TASK_KILLING_STATE"):
            await driver.update(self._status(driver, "TASK_KILLING"))
        self._signal(signal.SIGTERM)
        self._tasks.spawn(self._escalate(grace), "kill escalation")

    async def _escalate(self, grace: float) -> None:
        assert self.process is not None
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(self.process.wait())
        except TimeoutError:
            log.info("Task still running after its %gs grace period: SIGKILL", grace)
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass


async def run(options: Options, environ: dict[str, str] | None = None) -> None:
    executor = CommandExecutor(options)
    driver = ExecutorDriver(executor, environ)
    runner = asyncio.create_task(driver.run())
    done = asyncio.create_task(executor.done.wait())
    await asyncio.wait({runner, done}, return_when=asyncio.FIRST_COMPLETED)
    driver.stop()
    await runner
    done.cancel()
    if executor.process is not None and executor.process.returncode is None:
        # Leaving without the agent (recovery gave up): take the task with us.
        executor._signal(signal.SIGKILL)
    await executor.close()


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    asyncio.run(run(Options.parse(sys.argv[1:])))


if __name__ == "__main__":
    main()
