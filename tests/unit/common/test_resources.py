import pytest

from mesilla.common.resources import Resources, ResourcesError
from mesilla.v1 import codec
from mesilla.v1.mesos import Resource


def test_parse_agent_string_and_arithmetic_is_exact() -> None:
    total = Resources.parse("cpus:2;mem:1024;ports:[31000-32000];disk(ops):100;zones:{a,b}")
    assert total.scalar("cpus") == 2.0
    used = Resources.parse("cpus:0.1") + Resources.parse("cpus:0.2")
    left = total - used
    assert left.scalar("cpus") == 1.7  # no float drift: 2 - 0.1 - 0.2
    for _ in range(10):
        left = left - Resources.parse("cpus:0.1")
    assert left.scalar("cpus") == 0.7


def test_ranges_subtract_and_contain() -> None:
    ports = Resources.parse("ports:[31000-32000]")
    taken = Resources.parse("ports:[31000-31000,31500-31600]")
    rest = ports - taken
    assert repr(rest) == "ports:[31001-31499,31601-32000]"
    assert ports.contains(taken)
    assert not rest.contains(taken)
    assert (rest + taken) == ports


def test_sets_and_roles() -> None:
    r = Resources.parse("cpus:1;cpus(web):2;zones:{a,b}")
    assert r.reserved("web").scalar("cpus") == 2
    assert r.allocatable_to("web").scalar("cpus") == 3
    assert r.allocatable_to("db").scalar("cpus") == 1
    assert r.contains(Resources.parse("zones:{a}"))
    assert not r.contains(Resources.parse("zones:{c}"))


def test_json_form_round_trips() -> None:
    r = Resources.parse("cpus:1.5;mem:64;ports:[1-3]")
    listed = r.to_list(allocation_role="*")
    data = codec.encode(listed)
    back = Resources.from_list(codec.decode(data, list[Resource]))
    assert back == r
    assert Resources.parse(data.decode()) == r
    assert all(item.allocation_info.role == "*" for item in listed)


@pytest.mark.parametrize(
    "text",
    ["cpus", "cpus:abc", "cpus:-1", "ports:[5-1]", "ports:[1-2", "zones:{a", "[{\"name\": 3}]"],
)
def test_malformed_resources_are_rejected_with_a_reason(text: str) -> None:
    with pytest.raises(ResourcesError):
        Resources.parse(text)


def test_from_list_and_sum_add_up_like_plus() -> None:
    parts = [
        Resources.parse("cpus:1;mem:128;ports:[31000-31002]"),
        Resources.parse("cpus:0.5;ports:[31003-31005];zones:{a}"),
        Resources.parse("cpus(web):2;zones:{b}"),
    ]
    by_plus = parts[0] + parts[1] + parts[2]
    assert Resources.sum(parts) == by_plus
    assert Resources.from_list([r for p in parts for r in p.to_list()]) == by_plus
    assert repr(by_plus) == "cpus:1.5;cpus(web):2;mem:128;ports:[31000-31005];zones:{a,b}"
    assert Resources.sum([]) == Resources()
    # The summands are values: summing does not change them.
    assert repr(parts[0]) == "cpus:1;mem:128;ports:[31000-31002]"
