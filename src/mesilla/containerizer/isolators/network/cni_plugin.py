"""Running CNI plugins as the specification says: a configuration on stdin, the
parameters in `CNI_*` environment variables, a result or an error on stdout.

`PluginRunner` finds plugin binaries in `--network_cni_plugins_dir` (a search
path, as Mesos), asks each once for its supported versions (VERSION) and
refuses a network whose `cniVersion` one of them lacks, chains a
configuration list's plugins (ADD in order, each getting the previous result
as `prevResult`; DEL in reverse; CHECK in order with the final result where
the version allows it) and kills a plugin, with whatever it started, that has
not answered within the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass

from mesilla.containerizer.isolators.network.cni_spec import (
    CniError,
    Json,
    NetworkConfig,
    supports_check,
)

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# CNI_ARGS the reference plugins accept whatever else is in there.
CNI_ARGS = "IgnoreUnknown=1"


class PluginError(CniError):
    """A plugin answered with the spec's error object (or failed without one)."""

    def __init__(self, message: str, code: int | None = None, msg: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.msg = msg


@dataclass
class Attachment:
    """Where a network attaches: the runtime's parameters of one ADD/CHECK/DEL."""

    container_id: str
    netns: str
    ifname: str


class PluginRunner:
    def __init__(self, plugins_dir: str, timeout: float) -> None:
        self.search_path = [d for d in plugins_dir.split(":") if d]
        self.timeout = timeout
        self._versions: dict[tuple[str, float], list[str]] = {}

    def find(self, plugin_type: str) -> str:
        if "/" in plugin_type or plugin_type in ("", ".", ".."):
            raise CniError(f"Invalid CNI plugin type '{plugin_type}': a binary's name is expected")
        for directory in self.search_path:
            path = os.path.join(directory, plugin_type)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        raise CniError(
            f"CNI plugin '{plugin_type}' is not in --network_cni_plugins_dir="
            f"{':'.join(self.search_path)}: install it there (Debian: containernetworking-plugins)"
        )

    # --- the verbs, for a whole network ------------------------------------------------

    async def add(
        self, network: NetworkConfig, where: Attachment, runtime_config: Json | None = None
    ) -> Json:
        """ADD through the network's plugins; the last one's result."""
        await self.check_versions(network)
        result: Json | None = None
        for index in range(len(network.plugins)):
            conf = network.plugin_config(index, prev_result=result, runtime_config=runtime_config)
            output = await self.run("ADD", conf, where)
            if not isinstance(output, dict):
                raise PluginError(
                    f"CNI plugin '{conf['type']}' of network '{network.name}' returned no result "
                    f"for ADD of {where.container_id}"
                )
            result = output
        assert result is not None
        return result

    async def check(
        self, network: NetworkConfig, where: Attachment, result: Json,
        runtime_config: Json | None = None,
    ) -> bool:  # fmt: skip
        """CHECK through the plugins; False when the version (or the list) does not allow it."""
        if not supports_check(network.cni_version) or network.source.get("disableCheck"):
            return False
        for index in range(len(network.plugins)):
            conf = network.plugin_config(index, prev_result=result, runtime_config=runtime_config)
            await self.run("CHECK", conf, where)
        return True

    async def delete(
        self, network: NetworkConfig, where: Attachment, result: Json | None,
        runtime_config: Json | None = None,
    ) -> None:  # fmt: skip
        """DEL through the plugins in reverse, each tried even when another fails."""
        prev = result if result is not None and supports_check(network.cni_version) else None
        errors = []
        for index in reversed(range(len(network.plugins))):
            conf = network.plugin_config(index, prev_result=prev, runtime_config=runtime_config)
            try:
                await self.run("DEL", conf, where)
            except CniError as exc:
                errors.append(str(exc))
        if errors:
            raise CniError("; ".join(errors))

    async def check_versions(self, network: NetworkConfig) -> None:
        for plugin in network.plugins:
            supported = await self.supported_versions(plugin["type"])
            if network.cni_version not in supported:
                raise CniError(
                    f"CNI plugin '{plugin['type']}' does not support cniVersion "
                    f"{network.cni_version} of network '{network.name}' ({network.path}): "
                    f"use one of {', '.join(supported)}"
                )

    async def supported_versions(self, plugin_type: str) -> list[str]:
        """VERSION, asked once per binary (until it changes)."""
        path = self.find(plugin_type)
        key = (path, os.stat(path).st_mtime)
        if key not in self._versions:
            output = await self._exec(path, "VERSION", {"cniVersion": "1.0.0"}, {})
            versions = output.get("supportedVersions") if isinstance(output, dict) else None
            if not isinstance(versions, list):
                raise PluginError(f"CNI plugin {path} answered VERSION without supportedVersions")
            self._versions[key] = [str(v) for v in versions]
        return self._versions[key]

    # --- one plugin ------------------------------------------------------------------

    async def run(self, command: str, conf: Json, where: Attachment) -> Json | None:
        path = self.find(conf["type"])
        env = {
            "CNI_CONTAINERID": where.container_id,
            "CNI_NETNS": where.netns,
            "CNI_IFNAME": where.ifname,
            "CNI_ARGS": CNI_ARGS,
            "CNI_PATH": ":".join(self.search_path),
        }
        try:
            return await self._exec(path, command, conf, env)
        except PluginError as exc:
            raise PluginError(
                f"CNI plugin '{conf['type']}' failed to {command} container {where.container_id} "
                f"on network '{conf['name']}' ({where.ifname}): {exc}",
                exc.code,
                exc.msg,
            ) from None

    async def _exec(self, path: str, command: str, conf: Json, env: dict[str, str]) -> Json | None:
        environment = {
            # Plugins run helpers (iptables for portmap and ipMasq): the agent's PATH.
            "PATH": os.environ.get("PATH", DEFAULT_PATH),
            "CNI_COMMAND": command,
            **env,
        }
        process = await asyncio.create_subprocess_exec(
            path,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
            # Its own process group, so a timeout kills what it started too.
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(self.timeout):
                stdout, stderr = await process.communicate(json.dumps(conf).encode())
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            raise PluginError(
                f"no answer to {command} within {self.timeout:g}s: killed it"
            ) from None
        except BaseException:
            _kill_group(process.pid)
            await process.wait()
            raise
        if process.returncode != 0:
            raise _plugin_error(process.returncode, stdout, stderr)
        if not stdout.strip():
            return None
        try:
            output = json.loads(stdout)
        except ValueError:
            raise PluginError(f"{command} printed no JSON: {stdout[:200]!r}") from None
        return output if isinstance(output, dict) else None


def _plugin_error(returncode: int | None, stdout: bytes, stderr: bytes) -> PluginError:
    """The spec's error object (`code`, `msg`, `details`), else what the plugin printed."""
    with contextlib.suppress(ValueError):
        error = json.loads(stdout)
        if isinstance(error, dict) and "msg" in error:
            msg = str(error["msg"])
            details = f" ({error['details']})" if error.get("details") else ""
            code = error.get("code")
            return PluginError(f"{msg}{details}", int(code) if isinstance(code, int) else None, msg)
    printed = (stderr or stdout).decode(errors="replace").strip()[-500:]
    return PluginError(f"exited with {returncode}: {printed or 'no output'}")


def _kill_group(pgid: int) -> None:
    """SIGKILLs our plugin's process group (it leads it: start_new_session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
