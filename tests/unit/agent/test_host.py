"""Resources detection and --attributes parsing."""

from __future__ import annotations

import os
from typing import Any

import pytest

from mesilla.agent.host import (
    AttributesError,
    detect_resources,
    parse_attributes,
)
from mesilla.common.models import attributes_json
from mesilla.common.resources import ResourcesError
from mesilla.v1.mesos import ValueType


def test_given_resources_are_kept_and_the_rest_detected(tmp_path: Any) -> None:
    total = detect_resources("cpus:3;mem:100", str(tmp_path))
    assert total.scalar("cpus") == 3
    assert total.scalar("mem") == 100
    assert total.scalar("disk") > 0
    ports = [r for r in total.to_list() if r.name == "ports"]
    assert ports[0].ranges.range[0].begin == 31000  # type: ignore[union-attr]


def test_detection_follows_the_mesos_reservation_rule(tmp_path: Any) -> None:
    total = detect_resources(None, str(tmp_path))
    assert total.scalar("cpus") == os.cpu_count()
    with open("/proc/meminfo") as f:
        mem_mb = int(f.readline().split()[1]) // 1024
    expected = mem_mb - 1024 if mem_mb >= 2048 else mem_mb // 2
    assert abs(total.scalar("mem") - expected) <= 1


def test_cpus_zero_disables_detection(tmp_path: Any) -> None:
    assert detect_resources("cpus:0", str(tmp_path)).scalar("cpus") == 0


def test_bad_resources_name_the_flag(tmp_path: Any) -> None:
    with pytest.raises(ResourcesError, match="--resources"):
        detect_resources("cpus:lots", str(tmp_path))


def test_attributes() -> None:
    attrs = parse_attributes("rack:a;level:3;slots:[1-4,8-9]")
    assert [a.type for a in attrs] == [ValueType.TEXT, ValueType.SCALAR, ValueType.RANGES]
    assert attributes_json(attrs) == {"rack": "a", "level": 3.0, "slots": "[1-4, 8-9]"}
    assert parse_attributes(None) == []


@pytest.mark.parametrize("text", ["rack", "rack:", ":a", "zones:{a,b}", "slots:[1-x]"])
def test_bad_attributes(text: str) -> None:
    with pytest.raises(AttributesError):
        parse_attributes(text)
