"""The Mesos containerizer: launch flow, container states, nesting, destroy and recovery.

As Mesos's `MesosContainerizer` (`src/slave/containerizer/mesos/containerizer.cpp`):
a launch goes STARTING -> PROVISIONING (image only) -> PREPARING (isolators'
`prepare`, in order; the launcher forks the first process, held) -> ISOLATING
(`isolate(pid)`) -> FETCHING (CommandInfo.uris) -> RUNNING (the process execs).
A failure at any step destroys what was built and raises ContainerLaunchError
(`mesilla.common.errors`): ImageUnavailable (503) when the registry fails,
ContainerLaunchError (500) when the agent's own machinery does (`_AGENT_FAULTS`),
else InvalidContainer (400): what was asked cannot be launched.
A container ends when its first process exits, when an isolator reports a
limitation, or when it is destroyed; destroying a container destroys its
nested containers first. Runtime checkpoints live under `--runtime_dir` (see
`runtime_paths`), so that `recover` re-attaches after an agent restart.

One module of over 600 lines, as Mesos's: launch, watch, destroy and recover
are one state machine over `_Container` and its locks, read best in one place;
what is not that machine lives beside it (launcher, provisioner, isolators).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mesilla.common.blocking import in_thread
from mesilla.common.errors import (
    BadRequest,
    ContainerError,
    ContainerLaunchError,
    ContainerNotRemovable,
    ImageUnavailable,
    InvalidContainer,
    UnknownContainer,
)
from mesilla.common.flags import Flags
from mesilla.common.tasks import TaskOwner
from mesilla.containerizer import fetcher
from mesilla.containerizer.flags import ContainerizerFlags
from mesilla.containerizer.interface import LaunchResult, ResourceStatistics
from mesilla.containerizer.isolator import Isolator
from mesilla.containerizer.isolators import load_isolators
from mesilla.containerizer.isolators.network.cni_plugin import PluginError
from mesilla.containerizer.launch_info import (
    command_argv,
    container_environment,
    merge_launch_infos,
    own_executor_arguments,
)
from mesilla.containerizer.launcher import load_launcher
from mesilla.containerizer.launcher.base import Launcher, LaunchError
from mesilla.containerizer.provisioner.errors import (
    BlobDigestMismatch,
    RegistryAuthError,
    RegistryError,
)
from mesilla.containerizer.runtime_paths import RuntimeDir
from mesilla.containerizer.types import (
    ContainerClass,
    ContainerConfig,
    ContainerLaunchInfo,
    ContainerLimitation,
    ContainerRuntimeState,
    ContainerState,
    ContainerTermination,
    ForkRequest,
)
from mesilla.v1 import codec
from mesilla.v1.mesos import ContainerID, ContainerStatus, Image, Reason, Resource

if TYPE_CHECKING:  # imported when an image provider is enabled
    from mesilla.containerizer.provisioner.provisioner import Provisioner

log = logging.getLogger(__name__)

# Mesos bounds nesting (MAX_NESTING_LEVEL in containerizer.cpp).
MAX_NESTING_DEPTH = 32
# How many ended executor containers' terminations stay available to wait().
RECENTLY_ENDED_KEPT = 1000
# How long `close` lets launches and destroys in flight finish before cancelling them.
CLOSE_GRACE = 5.0


@dataclass
class _Container:
    id: ContainerID
    config: ContainerConfig
    state: ContainerState = ContainerState.STARTING
    pid: int | None = None
    launch_info: ContainerLaunchInfo = field(default_factory=ContainerLaunchInfo)
    children: set[ContainerID] = field(default_factory=set)
    limitation: ContainerLimitation | None = None
    provisioned: bool = False
    forked: bool = False
    launch_task: asyncio.Task[None] | None = None
    destroy_task: asyncio.Task[ContainerTermination] | None = None
    watchers: list[asyncio.Task[None]] = field(default_factory=list)
    termination: asyncio.Future[ContainerTermination] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Containerizer:
    def __init__(
        self,
        flags: ContainerizerFlags,
        launcher: Launcher,
        isolators: list[Isolator],
        provisioner: Provisioner | None,
    ) -> None:
        self._flags = flags
        self._launcher = launcher
        self._isolators = isolators
        self._provisioner = provisioner
        self._runtime = RuntimeDir(flags.runtime_dir)
        self._containers: dict[ContainerID, _Container] = {}
        # Ended nested and standalone containers, kept (and checkpointed) for WAIT
        # until `remove`, as Mesos does for the agent API's WAIT_(NESTED_)CONTAINER.
        self._terminated: dict[ContainerID, ContainerTermination] = {}
        # Ended executor containers: their checkpoints are gone, but a wait() that
        # comes late (e.g. right after recovery destroyed one) still gets the truth.
        self._recently_ended: OrderedDict[ContainerID, ContainerTermination] = OrderedDict()
        # Every launch, destroy and watcher; `close` ends them all.
        self._tasks = TaskOwner("the containerizer")
        self._closing = False

    @classmethod
    async def create(cls, given: ContainerizerFlags | Flags) -> Containerizer:
        """From the typed flags, or from a parsed command line (the agent's)."""
        flags = ContainerizerFlags.of(given)
        launcher_class = load_launcher(flags.launcher or _default_launcher(flags))
        launcher = await _construct(launcher_class, flags)
        isolators = await load_isolators(flags.isolation, flags)
        provisioner = None
        if flags.image_providers:
            from mesilla.containerizer.provisioner.provisioner import Provisioner

            provisioner = await Provisioner.create(flags)
        return cls(flags, launcher, isolators, provisioner)

    @property
    def launcher(self) -> Launcher:
        return self._launcher

    # --- recovery -------------------------------------------------------------

    async def recover(self, checkpointed: set[ContainerID]) -> None:
        # One walk of the runtime directory: it holds every container, and is read
        # while the restarted agent's executors wait to re-subscribe.
        found = self._runtime.containers()
        # Standalone containers (no executor) are the containerizer's own to recover.
        roots = {cid.root() for cid in checkpointed} | {
            cid for cid in found if cid.parent is None and self._runtime.is_standalone(cid)
        }  # fmt: skip
        states: list[ContainerRuntimeState] = []
        # Not the agent's, whether still alive or not: destroyed below, so that
        # isolators release what they hold for them too.
        unknown: set[ContainerID] = set()
        for container_id in found:
            termination = self._runtime.read_termination(container_id)
            if termination is not None:
                if container_id.root() in roots:
                    self._terminated[container_id] = termination
                continue
            if container_id.root() not in roots:
                unknown.add(container_id)
                continue
            config = self._runtime.read_config(container_id)
            pid = self._runtime.read_pid(container_id)
            if config is None:
                continue
            states.append(ContainerRuntimeState(container_id, pid, config.sandbox, config))
        orphans = await self._launcher.recover(states) | unknown
        for isolator in self._isolators:
            await isolator.recover(states, orphans)
        if self._provisioner is not None:
            await self._provisioner.recover([state.container_id for state in states])

        for state in states:  # parents come before their children
            assert state.config is not None
            container = _Container(state.container_id, state.config, ContainerState.RUNNING)
            container.pid = state.pid
            container.forked = True
            container.provisioned = state.config.rootfs is not None
            self._containers[state.container_id] = container
            parent_id = state.container_id.parent
            parent = self._containers.get(parent_id) if parent_id is not None else None
            if parent is not None:
                parent.children.add(state.container_id)
            self._watch(container)

        for orphan in sorted(orphans, key=lambda cid: -len(cid.path())):
            await self._destroy_orphan(orphan)
        for container_id in found:
            if container_id.root() not in roots and container_id.parent is None:
                await in_thread(self._runtime.remove, container_id)

    async def _destroy_orphan(self, container_id: ContainerID) -> None:
        log.info("Destroying orphan container %s", container_id)
        with contextlib.suppress(Exception):
            await self._launcher.destroy(container_id)
        await self._cleanup_isolators(container_id, self._isolators)
        if self._provisioner is not None:
            with contextlib.suppress(Exception):
                await self._provisioner.destroy(container_id)

    # --- launch ---------------------------------------------------------------

    async def launch(self, container_id: ContainerID, config: ContainerConfig) -> LaunchResult:
        if container_id in self._containers or container_id in self._terminated:
            return LaunchResult.ALREADY_LAUNCHED
        if self._closing:
            raise ContainerLaunchError(
                container_id, ContainerState.STARTING.value, "the containerizer is closing"
            )
        info = config.container_info
        if info is not None and info.type != "MESOS":
            return LaunchResult.NOT_SUPPORTED
        if container_id.parent is not None:
            depth = len(container_id.path()) - 1
            if depth > MAX_NESTING_DEPTH:
                raise InvalidContainer(
                    container_id, ContainerState.STARTING.value,
                    f"nesting depth {depth} exceeds the maximum of {MAX_NESTING_DEPTH}",
                )  # fmt: skip
            parent = self._containers.get(container_id.parent)
            if parent is None or parent.state == ContainerState.DESTROYING:
                raise InvalidContainer(
                    container_id, ContainerState.STARTING.value,
                    f"parent container {container_id.parent} does not exist or is being destroyed",
                )  # fmt: skip
        if self._image(config) is not None and self._provisioner is None:
            raise InvalidContainer(
                container_id, ContainerState.STARTING.value,
                "the container has an image but no image provider is enabled: "
                "set --image_providers=docker",
            )  # fmt: skip
        if container_id.parent is not None:
            self._containers[container_id.parent].children.add(container_id)

        container = _Container(container_id, config)
        self._containers[container_id] = container
        # Awaited below, which reports its failure: the owner need not log it.
        container.launch_task = self._tasks.spawn(
            self._launch(container), f"launch of {container_id}", log_failure=False
        )
        try:
            await asyncio.shield(container.launch_task)
        except asyncio.CancelledError:
            if not container.launch_task.done():
                raise  # our caller was cancelled, not the launch
        return LaunchResult.SUCCESS

    @staticmethod
    def _image(config: ContainerConfig) -> Image | None:
        info = config.container_info
        return info.mesos.image if info is not None and info.mesos is not None else None

    def _isolators_for(self, container: _Container) -> list[Isolator]:
        isolators = self._isolators
        if container.id.parent is not None:
            isolators = [i for i in isolators if i.supports_nesting]
        if container.config.container_class == ContainerClass.DEBUG:
            # As Mesos: debug containers (checks, exec sessions) have no resources,
            # rootfs or volumes of their own; the launcher puts them into their
            # parent's namespaces and filesystem.
            return [i for i in isolators if i.supports_debug]
        return isolators

    def _inherited(self, container: _Container) -> ContainerLaunchInfo | None:
        """A debug container starts from its parent's environment (MESOS_SANDBOX
        and secrets included), as Mesos, so a check sees what its task sees."""
        if container.config.container_class != ContainerClass.DEBUG or container.id.parent is None:
            return None
        parent = self._containers.get(container.id.parent)
        return None if parent is None else parent.launch_info

    def _parent_executor_secrets(self, container: _Container) -> set[str]:
        parent = self._containers.get(container.id.parent) if container.id.parent else None
        return set(parent.config.executor_secrets) if parent is not None else set()

    async def _launch(self, container: _Container) -> None:
        container_id, config = container.id, container.config
        try:
            self._runtime.write_config(container_id, config)
            if container_id.parent is None and config.executor_info is None:
                self._runtime.mark_standalone(container_id)
            image = self._image(config)
            if image is not None:
                container.state = ContainerState.PROVISIONING
                assert self._provisioner is not None
                provisioned = await self._provisioner.provision(container_id, image)
                container.provisioned = True
                config.rootfs = provisioned.rootfs
                config.image_config = provisioned.image_config
                self._runtime.write_config(container_id, config)

            container.state = ContainerState.PREPARING
            infos = []
            for isolator in self._isolators_for(container):
                info = await isolator.prepare(container_id, config)
                if info is not None:
                    infos.append(info)
            launch_info = merge_launch_infos(infos)
            container.launch_info = launch_info
            launch_info.environment.update(config.executor_secrets)
            launch_info.secret_names |= set(config.executor_secrets)
            parent_info = self._inherited(container)
            inherited = dict(parent_info.environment) if parent_info else {}
            for name in self._parent_executor_secrets(container):
                inherited.pop(name, None)
            if parent_info is not None:
                launch_info.secret_names |= parent_info.secret_names
            sandbox_dir = inherited.get("MESOS_SANDBOX") or (
                self._flags.sandbox_directory if config.rootfs else config.sandbox
            )
            launch_info.environment = {
                **inherited,
                **container_environment(config, launch_info, sandbox_dir),
            }
            argv = command_argv(config, launch_info) + own_executor_arguments(
                config, launch_info, self._flags.sandbox_directory
            )
            self._runtime.write_launch_info(container_id, launch_info)
            container.forked = True  # from here on the launcher may hold something to destroy
            container.pid = await self._launcher.fork(
                ForkRequest(container_id, argv, config, launch_info)
            )
            self._runtime.write_pid(container_id, container.pid)

            container.state = ContainerState.ISOLATING
            for isolator in self._isolators_for(container):
                await isolator.isolate(container_id, container.pid)

            container.state = ContainerState.FETCHING
            await fetcher.fetch(config.command.uris, config.sandbox, config.user)

            container.state = ContainerState.RUNNING
            await self._launcher.start(container_id)
            self._watch(container)
        except asyncio.CancelledError:
            await self._abort(container, "the container was destroyed during its launch")
            raise ContainerLaunchError(
                container_id, container.state.value, "destroyed during launch"
            ) from None
        except Exception as exc:
            step = container.state
            cause = str(exc) or type(exc).__name__
            log.warning(
                "Launch of container %s failed during %s: %s", container_id, step.value, cause
            )
            await self._abort(container, f"Failed to launch during {step.value}: {cause}")
            raise _launch_error(exc)(container_id, step.value, cause) from exc

    async def _abort(self, container: _Container, message: str) -> None:
        """Undoes a failed launch; waiters see a termination with the launch failure."""
        await self._finish(
            container,
            ContainerTermination(
                state="TASK_FAILED", reason=Reason.REASON_CONTAINER_LAUNCH_FAILED, message=message
            ),
        )

    def _watch(self, container: _Container) -> None:
        """Ends the container when its first process exits or an isolator limits it.

        Not once closing: the container keeps running, and a restarted agent recovers it.
        """
        if self._closing:
            return

        async def on_exit() -> None:
            await self._launcher.wait(container.id)
            self._start_destroy(container)

        async def on_limitation(isolator: Isolator) -> None:
            try:
                limitation = await isolator.watch(container.id)
            except Exception:
                log.exception("Isolator %s failed to watch %s", isolator.name, container.id)
                return
            if container.limitation is None:
                container.limitation = limitation
            self._start_destroy(container)

        container.watchers.append(self._tasks.spawn(on_exit(), f"exit of {container.id}"))
        for isolator in self._isolators_for(container):
            if type(isolator).watch is not Isolator.watch:
                container.watchers.append(
                    self._tasks.spawn(on_limitation(isolator), f"watch of {container.id} by {isolator.name}")
                )

    # --- wait, kill, destroy ----------------------------------------------------

    async def wait(self, container_id: ContainerID) -> ContainerTermination | None:
        container = self._containers.get(container_id)
        if container is not None:
            return await asyncio.shield(container.termination)
        return self._terminated.get(container_id) or self._recently_ended.get(container_id)

    async def kill(self, container_id: ContainerID, signal_number: int) -> bool:
        container = self._containers.get(container_id)
        if container is None:
            return False
        if signal_number == signal.SIGKILL or container.state != ContainerState.RUNNING:
            self._start_destroy(container)
            return True
        try:
            await self._launcher.kill(container_id, signal_number)
        except LaunchError as exc:  # it ended meanwhile; wait() tells how
            log.info("Could not signal container %s: %s", container_id, exc)
        return True

    async def destroy(self, container_id: ContainerID) -> ContainerTermination | None:
        container = self._containers.get(container_id)
        if container is None:
            return None
        return await asyncio.shield(self._start_destroy(container))

    def _start_destroy(self, container: _Container) -> asyncio.Task[ContainerTermination]:
        if container.destroy_task is None:
            container.destroy_task = self._tasks.spawn(
                self._destroy(container), f"destroy of {container.id}"
            )
        return container.destroy_task

    async def _destroy(self, container: _Container) -> ContainerTermination:
        container.state = ContainerState.DESTROYING
        children = [self._containers[c] for c in container.children if c in self._containers]
        await asyncio.gather(*(self._start_destroy(child) for child in children))
        launch = container.launch_task
        if launch is not None and not launch.done():
            # The launch undoes itself (and resolves the termination) when cancelled.
            launch.cancel()
            with contextlib.suppress(BaseException):
                await launch
        if container.termination.done():
            return container.termination.result()
        termination = ContainerTermination()
        limitation = container.limitation
        if limitation is not None:
            termination = ContainerTermination(
                state="TASK_FAILED",
                reason=limitation.reason,
                message=limitation.message,
                limited_resources=list(limitation.resources),
            )
        return await self._finish(container, termination)

    async def _finish(
        self, container: _Container, termination: ContainerTermination
    ) -> ContainerTermination:
        """Tears down launcher, isolators and rootfs, then resolves `wait`."""
        container_id = container.id
        for task in container.watchers:
            if task is not asyncio.current_task():
                task.cancel()
        if container.forked:
            # Asked before destroy, and given a turn to ask: a launcher may forget
            # the container once destroyed.
            exit_status = asyncio.create_task(self._launcher.wait(container_id))
            await asyncio.sleep(0)
            try:
                await self._launcher.destroy(container_id)
            except Exception:
                log.exception("Launcher failed to destroy container %s", container_id)
            if container.pid is not None:
                termination.status = await self._exit_status(container_id, exit_status)
            exit_status.cancel()
        await self._cleanup_isolators(container_id, self._isolators_for(container))
        if container.provisioned and self._provisioner is not None:
            try:
                await self._provisioner.destroy(container_id)
            except Exception:
                log.exception("Provisioner failed to destroy the rootfs of %s", container_id)

        if container_id.parent is not None or self._runtime.is_standalone(container_id):
            self._runtime.write_termination(container_id, termination)
            self._terminated[container_id] = termination
        else:
            # The whole tree's checkpoints go; ended nested containers with them.
            await in_thread(self._runtime.remove, container_id)
            for ended in [c for c in self._terminated if c.root() == container_id]:
                del self._terminated[ended]
            self._recently_ended[container_id] = termination
            while len(self._recently_ended) > RECENTLY_ENDED_KEPT:
                self._recently_ended.popitem(last=False)
        self._containers.pop(container_id, None)
        parent = self._containers.get(container_id.parent) if container_id.parent else None
        if parent is not None:
            parent.children.discard(container_id)
        if not container.termination.done():
            container.termination.set_result(termination)
        return termination

    async def _exit_status(
        self, container_id: ContainerID, waiting: asyncio.Task[int | None]
    ) -> int | None:
        """The launcher's answer, else the supervisor's checkpoint."""
        status = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                status = await asyncio.shield(waiting)
        return status if status is not None else self._runtime.read_status(container_id)

    @staticmethod
    async def _cleanup_isolators(container_id: ContainerID, isolators: list[Isolator]) -> None:
        for isolator in reversed(isolators):
            try:
                await isolator.cleanup(container_id)
            except Exception:
                log.exception("Isolator %s failed to clean up %s", isolator.name, container_id)

    # --- the rest of the interface ---------------------------------------------------

    async def update(
        self, container_id: ContainerID, resources: list[Resource], limits: dict[str, float]
    ) -> None:
        container = self._containers.get(container_id)
        if container is None:
            raise UnknownContainer(f"Container {container_id} cannot be found", container_id=container_id)
        container.config.resources = list(resources)
        container.config.limits = dict(limits)
        for isolator in self._isolators_for(container):
            try:
                await isolator.update(container_id, resources, limits)
            except Exception as exc:
                raise _isolator_error("update", isolator, container_id, exc) from exc

    async def usage(self, container_id: ContainerID) -> ResourceStatistics:
        container = self._containers.get(container_id)
        if container is None:
            raise UnknownContainer(f"Container {container_id} cannot be found", container_id=container_id)
        statistics: dict[str, Any] = {"timestamp": time.time()}
        for resource in container.config.resources:
            if resource.name == "cpus" and resource.scalar is not None:
                statistics["cpus_limit"] = statistics.get("cpus_limit", 0) + resource.scalar.value
            elif resource.name == "mem" and resource.scalar is not None:
                statistics["mem_limit_bytes"] = statistics.get("mem_limit_bytes", 0) + int(
                    resource.scalar.value * 1024 * 1024
                )
        for isolator in self._isolators_for(container):
            try:
                statistics.update(await isolator.usage(container_id))
            except Exception as exc:  # e.g. its cgroup went with the container
                raise _isolator_error("usage", isolator, container_id, exc) from exc
        return ResourceStatistics.from_fields(statistics)

    async def status(self, container_id: ContainerID) -> ContainerStatus:
        container = self._containers.get(container_id)
        if container is None:
            raise UnknownContainer(f"Container {container_id} cannot be found", container_id=container_id)
        fields: dict[str, Any] = {}
        for isolator in self._isolators_for(container):
            try:
                fields.update(await isolator.status(container_id))
            except Exception as exc:
                raise _isolator_error("status", isolator, container_id, exc) from exc
        try:
            # Isolators report ContainerStatus fields as JSON.
            status = codec.convert(fields, ContainerStatus)
        except BadRequest as exc:
            log.warning("Ignoring a malformed status of container %s: %s", container_id, exc.reason)
            status = ContainerStatus()
        status.executor_pid = container.pid
        return status

    def containers(self) -> list[ContainerID]:
        return list(self._containers)

    def state(self, container_id: ContainerID) -> ContainerState | None:
        container = self._containers.get(container_id)
        return container.state if container is not None else None

    def config(self, container_id: ContainerID) -> ContainerConfig | None:
        container = self._containers.get(container_id)
        return container.config if container is not None else None

    async def remove(self, container_id: ContainerID) -> None:
        if container_id in self._containers:
            raise ContainerNotRemovable(
                f"Container {container_id} is still running: kill it and wait for it first",
                container_id=container_id,
            )
        if self._terminated.pop(container_id, None) is None and not os.path.isdir(
            self._runtime.path(container_id)
        ):
            raise UnknownContainer(f"Container {container_id} cannot be found", container_id=container_id)
        await in_thread(self._runtime.remove, container_id)
        parent = self._containers.get(container_id.parent) if container_id.parent else None
        if parent is not None:
            parent.children.discard(container_id)

    async def prune_images(self, excluded: list[Image]) -> None:
        if self._provisioner is None:
            return
        images = (self._image(c.config) for c in self._containers.values())
        in_use = [image for image in images if image is not None]
        await self._provisioner.prune(excluded, in_use)

    async def close(self) -> None:
        """Stops background work; containers keep running (the agent may restart).

        Launches and destroys in flight get CLOSE_GRACE to finish, then are
        cancelled (a cancelled launch rolls its container back); `close`
        returns once every one of them has ended. Nothing launches afterwards;
        a destroy still does, owned anew, until the next `close`.
        """
        self._closing = True
        for container in self._containers.values():
            for task in container.watchers:
                task.cancel()
            container.watchers.clear()
        tasks, self._tasks = self._tasks, TaskOwner("the containerizer")
        await tasks.close(grace=CLOSE_GRACE)
        for isolator in reversed(self._isolators):
            try:
                await isolator.close()
            except Exception:
                log.exception("Isolator %s failed to close", isolator.name)
        if self._provisioner is not None:
            await self._provisioner.close()
        await self._launcher.close()


def _isolator_error(
    what: str, isolator: Isolator, container_id: ContainerID, cause: Exception
) -> ContainerError:
    """An isolator's failure, as the one kind the containerizer's callers handle."""
    return ContainerError(
        f"Isolator {isolator.name} failed the {what} of container {container_id}: {cause}",
        container_id=container_id,
    )


# Failures of the agent's own machinery, not of what was asked: the OCI runtime and its
# monitor (a runc crash), a CNI plugin, the disk, the agent's registry credentials, a
# registry's corrupt blob.
_AGENT_FAULTS = (LaunchError, PluginError, OSError, RegistryAuthError, BlobDigestMismatch)


def _launch_error(cause: Exception) -> type[ContainerLaunchError]:
    """What kind of launch failure `cause` is: the registry's (503), the agent's own
    machinery's (500), else what was asked for (400, as Mesos answers every one)."""
    if isinstance(cause, RegistryError) and not isinstance(cause, RegistryAuthError):
        return ImageUnavailable
    if isinstance(cause, _AGENT_FAULTS):
        return ContainerLaunchError
    return InvalidContainer


def _default_launcher(flags: ContainerizerFlags) -> str:
    """linux when root and the linux launcher works here, else posix (as Mesos)."""
    if os.geteuid() != 0:
        return "posix"
    try:
        linux = load_launcher("linux")
        available = linux.available(flags)
    except Exception as exc:  # not built or not working here: fall back, as Mesos does
        log.info("The linux launcher is not available (%s): using posix", exc)
        return "posix"
    return "linux" if available else "posix"


async def _construct(cls: type[Launcher], flags: ContainerizerFlags) -> Launcher:
    """`await cls.create(flags)` when the class defines it, else `cls(flags)`."""
    create = getattr(cls, "create", None)
    if create is not None and asyncio.iscoroutinefunction(create):
        launcher: Launcher = await create(flags)
        return launcher
    return cls(flags)
