"""Secrets: resolved as Mesos's default resolver does, and redacted from what is written."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from mesilla.common import secrets
from mesilla.containerizer.isolators.environment_secret import EnvironmentSecretIsolator
from mesilla.containerizer.runtime_paths import RuntimeDir
from mesilla.containerizer.types import ContainerConfig, ContainerLaunchInfo
from mesilla.v1.mesos import CommandInfo, ContainerID, Environment, EnvironmentVariable


def _value(text: str) -> dict[str, object]:
    return {"type": "VALUE", "value": {"data": base64.b64encode(text.encode()).decode()}}


def test_a_value_secret_resolves_to_its_decoded_data() -> None:
    assert secrets.resolve(_value("hunter2"), "X") == "hunter2"


@pytest.mark.parametrize(
    "secret,reason",
    [
        ({"type": "REFERENCE", "reference": {"name": "/db"}}, "no secret resolver"),
        ({"type": "VALUE"}, "without 'value.data'"),
        ({"type": "VALUE", "value": {"data": "not base64!"}}, "not valid base64"),
        (None, "has no secret"),
    ],
)
def test_unresolvable_secrets_name_the_variable_and_the_reason(secret: object, reason: str) -> None:
    with pytest.raises(secrets.SecretError, match=reason) as raised:
        secrets.resolve(secret, "Environment variable 'X'")
    assert "'X'" in str(raised.value)


def test_redact_drops_only_the_values() -> None:
    document = {
        "command": {"environment": {"variables": [
            {"name": "X", "type": "SECRET", "secret": _value("hunter2")},
            {"name": "Y", "type": "VALUE", "value": "plain"},
        ]}},
    }  # fmt: skip
    redacted = json.loads(secrets.redact(json.dumps(document).encode()))
    variables = redacted["command"]["environment"]["variables"]
    assert variables[0] == {"name": "X", "type": "SECRET", "secret": {"type": "VALUE", "value": {}}}
    assert variables[1] == {"name": "Y", "type": "VALUE", "value": "plain"}
    plain = b'{"a": 1}'
    assert secrets.redact(plain) is plain


async def test_the_isolator_puts_secrets_into_the_environment_and_names_them() -> None:
    variables = [
        EnvironmentVariable(name="X", type="SECRET", secret=_value("hunter2")),
        EnvironmentVariable(name="Y", value="plain"),
    ]
    config = ContainerConfig(
        command=CommandInfo(value="true", environment=Environment(variables=variables)),
        sandbox="/s",
    )
    info = await EnvironmentSecretIsolator().prepare(ContainerID(value="c"), config)
    assert info is not None
    assert info.environment == {"X": "hunter2"} and info.secret_names == {"X"}
    no_secret = ContainerConfig(command=CommandInfo(value="true"), sandbox="/s")
    assert await EnvironmentSecretIsolator().prepare(ContainerID(value="c"), no_secret) is None


def test_the_runtime_dir_keeps_no_secret(tmp_path: Path) -> None:
    variables = [EnvironmentVariable(name="X", type="SECRET", secret=_value("hunter2"))]
    command = CommandInfo(value="true", environment=Environment(variables=variables))
    runtime = RuntimeDir(str(tmp_path))
    cid = ContainerID(value="c")
    runtime.write_config(cid, ContainerConfig(command=command, sandbox="/s"))
    info = ContainerLaunchInfo(
        environment={"X": "hunter2", "Y": "plain"}, secret_names={"X"}, command=command
    )
    runtime.write_launch_info(cid, info)
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    encoded = base64.b64encode(b"hunter2")
    assert b"hunter2" not in written and encoded not in written and b"plain" in written
    config = runtime.read_config(cid)
    assert config is not None and config.command.environment is not None
    assert config.command.environment.variables[0].name == "X"  # the rest is intact
