"""Every LAUNCH, LAUNCH_GROUP, offer, framework and call rule of `mesilla.master.validation`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from mesilla.common.errors import BadRequest
from mesilla.common.resources import Resources
from mesilla.master import validation
from mesilla.master.validation import InvalidOffers, InvalidTask, LaunchContext, check_task, check_task_group
from mesilla.v1 import scheduler as sched
from mesilla.v1.mesos import ExecutorInfo, FrameworkInfo, Offer, TaskGroupInfo, TaskInfo


def _message(rule: Callable[..., object]) -> Callable[..., str | None]:
    """A rule as the tests below read it: None when the input passes, else the reason of
    its `BadRequest` (a 400 that names the field)."""

    def run(*args: Any) -> str | None:
        try:
            rule(*args)
        except BadRequest as exc:
            assert exc.status == 400
            return exc.reason
        return None

    return run


validate_call = _message(validation.validate_call)
validate_framework_info = _message(validation.validate_framework_info)
validate_framework_update = _message(validation.validate_framework_update)
validate_offers = _message(validation.validate_offers)
validate_role = _message(validation.validate_role)
validate_task = _message(check_task)
validate_task_group = _message(check_task_group)

AGENT = "agent-1"


def task(name: str = "t", **fields: Any) -> TaskInfo:
    raw = {
        "name": name,
        "task_id": {"value": name},
        "agent_id": {"value": AGENT},
        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.5}}],
        "command": {"value": "true"},
        **fields,
    }
    return msgspec.convert({k: v for k, v in raw.items() if v is not None}, TaskInfo)


def executor(**fields: Any) -> ExecutorInfo:
    raw = {
        "executor_id": {"value": "e"},
        "type": "DEFAULT",
        "resources": Resources.parse("cpus:0.1;mem:32;disk:10").to_list(),
        **fields,
    }
    return msgspec.convert(
        {k: v for k, v in raw.items() if v is not None}, ExecutorInfo
    )


def context(
    resources: str = "cpus:4;mem:1024;disk:1024", **fields: Any
) -> LaunchContext:
    return LaunchContext(
        framework_id="fw",
        agent_id=AGENT,
        available=Resources.parse(resources),
        **fields,
    )


# --- ids, roles, frameworks -------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"type": "TEARDOWN", "framework_id": {"value": ".."}}, "'framework_id'"),
        (
            {
                "type": "ACCEPT",
                "framework_id": {"value": "f"},
                "accept": {"offer_ids": [{"value": "o/1"}]},
            },
            "'accept.offer_ids[0]'",
        ),
        (
            {
                "type": "KILL",
                "framework_id": {"value": "f"},
                "kill": {"task_id": {"value": "a/b"}, "agent_id": {"value": "a"}},
            },
            "'kill.task_id'",
        ),
    ],
)
def test_calls_with_bad_ids(fields: dict[str, Any], where: str) -> None:
    """Every id of a call is checked before anything is looked up by it."""
    error = validate_call(msgspec.convert(fields, sched.Call)) or ""
    assert error.startswith(f"{where} is invalid:"), error


def test_the_ids_of_launched_tasks_are_left_to_each_tasks_validation() -> None:
    call = {
        "type": "ACCEPT",
        "framework_id": {"value": "f"},
        "accept": {"offer_ids": [{"value": "o"}], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [
                {"name": "t", "task_id": {"value": "../t"}, "agent_id": {"value": "a"}}]}},
        ]},
    }  # fmt: skip
    assert validate_call(msgspec.convert(call, sched.Call)) is None


@pytest.mark.parametrize(
    "role", ["", "/a", "a/", "a//b", "a/./b", "a/..", "a/*", "-a", "a/-b", "a b", "a\tb", "a\x7fb"]
)
def test_bad_roles(role: str) -> None:
    assert validate_role(role) is not None


# Only '*' as a whole component is reserved; Mesos accepts it, and '\\', inside one.
@pytest.mark.parametrize("role", ["*", "web", "eng/web", "a*", "a\\b", "a.b", "a-"])
def test_good_roles(role: str) -> None:
    assert validate_role(role) is None


def info(**fields: Any) -> FrameworkInfo:
    return msgspec.convert({"user": "u", "name": "n", **fields}, FrameworkInfo)


def test_framework_info_rules() -> None:
    multi = [{"type": "MULTI_ROLE"}]
    assert validate_framework_info(info()) is None
    assert validate_framework_info(info(capabilities=multi, roles=["a", "b"])) is None
    assert "MULTI_ROLE" in (validate_framework_info(info(roles=["a"])) or "")
    assert "must not be set" in (
        validate_framework_info(info(capabilities=multi, role="a")) or ""
    )
    assert "duplicates" in (
        validate_framework_info(info(capabilities=multi, roles=["a", "a"])) or ""
    )
    assert "role" in (validate_framework_info(info(role="-bad")) or "")
    assert "negative" in (validate_framework_info(info(failover_timeout=-1)) or "")
    assert "suppressed" in (validate_framework_info(info(), ["other"]) or "")
    assert validate_framework_info(info(), ["*"]) is None


def test_framework_update_rules() -> None:
    old = info(id={"value": "f"}, principal="p")
    assert (
        validate_framework_update(
            old, info(id={"value": "f"}, principal="p", name="new")
        )
        is None
    )
    assert "id" in (
        validate_framework_update(old, info(id={"value": "g"}, principal="p")) or ""
    )
    assert "principal" in (
        validate_framework_update(old, info(id={"value": "f"}, principal="q")) or ""
    )
    assert "user" in (
        validate_framework_update(old, info(id={"value": "f"}, principal="p", user="x"))
        or ""
    )
    assert "checkpoint" in (
        validate_framework_update(
            old, info(id={"value": "f"}, principal="p", checkpoint=True)
        )
        or ""
    )


# --- calls ---------------------------------------------------------------------------------


def call(**fields: Any) -> sched.Call:
    return msgspec.convert(fields, sched.Call)


def test_call_rules() -> None:
    sub = {"framework_info": {"user": "u", "name": "n", "id": {"value": "f"}}}
    assert (
        validate_call(
            call(type="SUBSCRIBE", subscribe=sub, framework_id={"value": "f"})
        )
        is None
    )
    assert "differs" in (validate_call(call(type="SUBSCRIBE", subscribe=sub)) or "")
    assert "'subscribe'" in (validate_call(call(type="SUBSCRIBE")) or "")
    assert "framework_id" in (validate_call(call(type="TEARDOWN")) or "")
    assert validate_call(call(type="TEARDOWN", framework_id={"value": "f"})) is None
    assert "'kill'" in (
        validate_call(call(type="KILL", framework_id={"value": "f"})) or ""
    )
    assert "type" in (validate_call(call(type="UNKNOWN")) or "")
    ack = {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "AAAA"}
    assert "uuid" in (
        validate_call(
            call(type="ACKNOWLEDGE", framework_id={"value": "f"}, acknowledge=ack)
        )
        or ""
    )
    ack["uuid"] = "AAAAAAAAAAAAAAAAAAAAAA=="
    assert (
        validate_call(
            call(type="ACKNOWLEDGE", framework_id={"value": "f"}, acknowledge=ack)
        )
        is None
    )
    update = {"framework_info": {"user": "u", "name": "n", "id": {"value": "g"}}}
    assert "differs" in (
        validate_call(
            call(
                type="UPDATE_FRAMEWORK",
                framework_id={"value": "f"},
                update_framework=update,
            )
        )
        or ""
    )


# --- offers --------------------------------------------------------------------------------


def offer(
    offer_id: str, *, framework: str = "fw", agent: str = AGENT, role: str = "*"
) -> Offer:
    return msgspec.convert(
        {
            "id": {"value": offer_id},
            "framework_id": {"value": framework},
            "agent_id": {"value": agent},
            "hostname": "h",
            "allocation_info": {"role": role},
        },
        Offer,
    )


def test_offer_rules() -> None:
    offers = {
        "o1": offer("o1"),
        "o2": offer("o2"),
        "other-fw": offer("other-fw", framework="x"),
        "other-agent": offer("other-agent", agent="a2"),
        "other-role": offer("other-role", role="r"),
    }
    connected = {AGENT, "a2"}.__contains__
    assert validate_offers(["o1", "o2"], offers, "fw", connected) is None
    assert "No offers" in (validate_offers([], offers, "fw", connected) or "")
    assert "Duplicate" in (validate_offers(["o1", "o1"], offers, "fw", connected) or "")
    assert "no longer valid" in (
        validate_offers(["gone"], offers, "fw", connected) or ""
    )
    assert "not made to framework" in (
        validate_offers(["other-fw"], offers, "fw", connected) or ""
    )
    assert "one single agent" in (
        validate_offers(["o1", "other-agent"], offers, "fw", connected) or ""
    )
    assert "same role" in (
        validate_offers(["o1", "other-role"], offers, "fw", connected) or ""
    )
    assert "not connected" in (
        validate_offers(["o1"], offers, "fw", {"a2"}.__contains__) or ""
    )


# --- LAUNCH ----------------------------------------------------------------------------------


def test_valid_command_task() -> None:
    assert validate_task(task(), context()) is None


@pytest.mark.parametrize(
    ("fields", "ctx_fields", "message"),
    [
        ({}, {"task_ids": {"t"}}, "duplicate ID"),
        ({}, {"live_task_ids": ({}, {"t"})}, "duplicate ID"),
        ({"agent_id": {"value": "elsewhere"}}, {}, "offer is for agent"),
        ({"command": None}, {}, "not both"),
        (
            {"executor": {"executor_id": {"value": "e"}, "command": {"value": "x"}}},
            {},
            "not both",
        ),
        ({"resources": []}, {}, "no resources"),
        (
            {"resources": [{"name": "cpus", "type": "SCALAR"}]},
            {},
            "BadRequest task resources",
        ),
        (
            {"resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 8}}]},
            {},
            "more resources",
        ),
        (
            {"resources": [{"name": "gpus", "type": "SCALAR", "scalar": {"value": 1}}]},
            {},
            "more resources",
        ),
        ({"kill_policy": {"grace_period": {"nanoseconds": -1}}}, {}, "grace_period"),
        ({"max_completion_time": {"nanoseconds": -1}}, {}, "max_completion_time"),
        ({"command": {"shell": True}}, {}, "command.value"),
        ({"container": {"type": "DOCKER"}}, {}, "container.docker"),
        # Ids of launched tasks are the task's error (TASK_ERROR), as in Mesos, not the call's.
        ({"task_id": {"value": "../t"}}, {}, "invalid id: 'task_id' is invalid"),
        (
            {"command": None, "executor": {"executor_id": {"value": ".."}, "command": {"value": "x"}}},
            {},
            "invalid id: 'executor.executor_id' is invalid",
        ),
    ],
)
def test_invalid_tasks(
    fields: dict[str, Any], ctx_fields: dict[str, Any], message: str
) -> None:
    error = validate_task(task(**fields), context(**ctx_fields))
    assert error is not None and message in error


def custom_task(**executor_fields: Any) -> TaskInfo:
    raw = {
        "executor_id": {"value": "e"},
        "type": "CUSTOM",
        "command": {"value": "run"},
        "resources": Resources.parse("cpus:0.1;mem:32").to_list(),
        **executor_fields,
    }
    return task(command=None, executor={k: v for k, v in raw.items() if v is not None})


def test_executor_rules_for_launch() -> None:
    assert validate_task(custom_task(), context()) is None
    assert "CUSTOM needs 'command'" in (
        validate_task(custom_task(command=None), context()) or ""
    )
    assert "FrameworkID" in (
        validate_task(custom_task(framework_id={"value": "other"}), context()) or ""
    )
    assert "shutdown_grace_period" in (
        validate_task(custom_task(shutdown_grace_period={"nanoseconds": -5}), context())
        or ""
    )
    # The executor's resources count unless it already runs on the agent.
    assert "more resources" in (
        validate_task(custom_task(), context("cpus:0.55;mem:100")) or ""
    )
    running = custom_task().executor
    assert running is not None
    assert (
        validate_task(
            custom_task(), context("cpus:0.55;mem:100", executors={"e": running})
        )
        is None
    )
    changed = custom_task(command={"value": "something else"})
    assert "not compatible" in (
        validate_task(changed, context(executors={"e": running})) or ""
    )


# --- LAUNCH_GROUP --------------------------------------------------------------------------


def group(*tasks: TaskInfo) -> TaskGroupInfo:
    return TaskGroupInfo(tasks=list(tasks) or [task("a"), task("b")])


def test_valid_group() -> None:
    assert validate_task_group(executor(), group(), context()) is None


@pytest.mark.parametrize(
    ("executor_fields", "message"),
    [
        ({"type": "UNKNOWN"}, "'ExecutorInfo.type' must be set"),
        ({"command": {"value": "x"}}, "DEFAULT must not set 'command'"),
        (
            {"container": {"type": "DOCKER", "docker": {"image": "x"}}},
            "MESOS container",
        ),
        (
            {
                "container": {
                    "type": "MESOS",
                    "mesos": {"image": {"type": "DOCKER", "docker": {"name": "x"}}},
                }
            },
            "container.mesos.image",
        ),
        ({"resources": Resources.parse("cpus:0.001;mem:32;disk:1").to_list()}, "cpus"),
        ({"resources": Resources.parse("cpus:0.1;mem:31;disk:1").to_list()}, "mem"),
        ({"resources": Resources.parse("cpus:0.1;mem:32").to_list()}, "disk"),
        ({"type": "CUSTOM"}, "needs 'command'"),
    ],
)
def test_invalid_group_executors(executor_fields: dict[str, Any], message: str) -> None:
    error = validate_task_group(executor(**executor_fields), group(), context())
    assert error is not None and message in error


def test_group_task_rules() -> None:
    ex = executor()
    assert "empty" in (
        validate_task_group(ex, TaskGroupInfo(tasks=[]), context()) or ""
    )
    assert "duplicate task ID" in (
        validate_task_group(ex, group(task("a"), task("a")), context()) or ""
    )
    other = task("b", executor={"executor_id": {"value": "other"}, "type": "DEFAULT"})
    assert "differs from the group's executor" in (
        validate_task_group(ex, group(task("a"), other), context()) or ""
    )
    same = task("b", executor=msgspec.to_builtins(ex))
    assert validate_task_group(ex, group(task("a"), same), context()) is None
    own_network = {"type": "MESOS", "network_infos": [{"name": "net"}]}
    checked = task(
        "b", container=own_network, health_check={"type": "TCP", "tcp": {"port": 80}}
    )
    assert "health checks" in (validate_task_group(ex, group(checked), context()) or "")
    command_check = task("b", container=own_network, health_check={"type": "COMMAND"})
    assert validate_task_group(ex, group(command_check), context()) is None
    docker = task("b", container={"type": "DOCKER", "docker": {"image": "x"}})
    assert "DOCKER" in (validate_task_group(ex, group(docker), context()) or "")
    assert "more resources" in (
        validate_task_group(ex, group(), context("cpus:1.05;mem:1024;disk:1024")) or ""
    )
    assert (
        validate_task_group(ex, group(), context("cpus:1.1;mem:1024;disk:1024")) is None
    )
    # A running executor's resources are not needed again (nor its minimums).
    assert (
        validate_task_group(ex, group(), context("cpus:1;mem:1", executors={"e": ex}))
        is None
    )
    dup_live = context(live_task_ids=({"a": object()},))
    assert "duplicate ID" in (validate_task_group(ex, group(), dup_live) or "")


def test_limits_need_share_cgroups_false() -> None:
    ex = executor()
    limits = {"cpus": {"value": 1}}
    shared = task("a", limits=limits)
    assert "share_cgroups" in (validate_task_group(ex, group(shared), context()) or "")
    isolated = task(
        "a",
        limits=limits,
        container={"type": "MESOS", "linux_info": {"share_cgroups": False}},
    )
    assert validate_task_group(ex, group(isolated), context()) is None
    mixed = group(isolated, task("b"))
    assert "same" in (validate_task_group(ex, mixed, context()) or "")


def test_checks_return_what_the_launch_takes_from_the_offer() -> None:
    assert check_task(task(), context()) == Resources.parse("cpus:0.5")
    assert check_task(custom_task(), context()) == Resources.parse("cpus:0.6;mem:32")
    running = custom_task().executor
    assert running is not None
    assert check_task(
        custom_task(), context(executors={"e": running})
    ) == Resources.parse("cpus:0.5")
    assert check_task_group(executor(), group(), context()) == Resources.parse(
        "cpus:1.1;mem:32;disk:10"
    )
    with pytest.raises(InvalidTask, match="more resources"):
        check_task(task(), context("cpus:0.1"))
    with pytest.raises(InvalidTask, match="empty"):
        check_task_group(executor(), TaskGroupInfo(tasks=[]), context())


def test_errors_name_the_offending_field() -> None:
    with pytest.raises(BadRequest) as raised:
        validation.validate_framework_info(info(failover_timeout=-1))
    assert raised.value.field == "framework_info.failover_timeout"
    with pytest.raises(InvalidOffers) as offers:
        validation.validate_offers([], {}, "fw", bool)
    assert offers.value.field == "accept.offer_ids" and offers.value.status == 400
    with pytest.raises(InvalidTask) as bad:
        check_task(task(resources=[]), context())
    assert bad.value.field == "resources" and str(bad.value) == "Task uses no resources"
    with pytest.raises(InvalidTask) as in_group:
        check_task_group(executor(), group(task(resources=[])), context())
    assert in_group.value.reason == "Task t: Task uses no resources"
