"""How the master renders its large answers and keeps its heap: `rendered`, `OfferedCache`, `HeapKeeper`."""

from __future__ import annotations

import asyncio
import gc
import weakref

import msgspec
import pytest

from mesilla.common.documents import Pieces
from mesilla.common.resources import Resources
from mesilla.common.tasks import TaskOwner
from mesilla.master import endpoints
from mesilla.master.accounting import OfferedCache
from mesilla.master.endpoints import rendered
from mesilla.master.heap import HeapKeeper, _freeze_survivors
from mesilla.v1 import codec
from mesilla.v1.mesos import AgentID, FrameworkID, Offer, OfferID


def test_rendered_items_encode_to_the_bytes_of_the_whole_and_let_the_loop_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slice of no time: the loop gets a turn between any two items.
    monkeypatch.setattr(endpoints, "RENDER_SLICE", 0.0)
    items = [{"id": i, "name": f"n{i}", "resources": {"cpus": 0.1 * i}} for i in range(601)]

    async def render_while_counting() -> tuple[Pieces, int]:
        turns = 0
        stop = False

        async def count() -> None:
            nonlocal turns
            while not stop:
                turns += 1
                await asyncio.sleep(0)

        counter = asyncio.create_task(count())
        await asyncio.sleep(0)
        started = turns
        out = await rendered(items, dict)
        stop = True
        await counter
        return out, turns - started

    out, turns = asyncio.run(render_while_counting())
    assert codec.encode({"items": out}) == msgspec.json.encode({"items": items})
    # The loop ran other work between the items.
    assert turns >= 600


def _offer(number: int, text: str) -> Offer:
    return Offer(
        id=OfferID(value=f"o{number}"),
        framework_id=FrameworkID(value="f"),
        agent_id=AgentID(value="a"),
        hostname="h",
        resources=Resources.parse(text).to_list(allocation_role="*"),
    )


def test_offered_cache_follows_the_offers() -> None:
    cache = OfferedCache()
    offers: dict[str, Offer] = {}
    assert cache(offers) == Resources()
    offers["o1"] = _offer(1, "cpus:1;mem:10")
    offers["o2"] = _offer(2, "cpus:2;ports:[1-2]")
    assert cache(offers) == Resources.parse("cpus:3;mem:10;ports:[1-2]")
    del offers["o1"]
    assert cache(offers) == Resources.parse("cpus:2;ports:[1-2]")
    offers["o3"] = _offer(3, "mem:5")
    assert cache(offers) == Resources.parse("cpus:2;mem:5;ports:[1-2]")


def test_heap_keeper_freezes_survivors_of_full_collections_until_stopped() -> None:
    async def run() -> tuple[int, int, bool]:
        keeper = HeapKeeper()
        keeper.start(TaskOwner("test"))
        try:
            gc.unfreeze()
            survivor = [object() for _ in range(10)]
            gc.collect()
            frozen_after_collect = gc.get_freeze_count()
            del survivor
        finally:
            await keeper.stop()
        return frozen_after_collect, gc.get_freeze_count(), _freeze_survivors in gc.callbacks

    frozen_after_collect, frozen_after_stop, still_hooked = asyncio.run(run())
    assert frozen_after_collect > 0
    assert frozen_after_stop == 0
    assert not still_hooked


def test_heap_keeper_thaws_and_collects_what_died_frozen() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    async def run() -> bool:
        keeper = HeapKeeper(thaw_interval=0.01)
        cycle = Cycle()
        keeper.start(TaskOwner("test"))  # freezes the cycle with everything else
        try:
            ref = weakref.ref(cycle)
            del cycle
            gc.collect(1)  # a young pass does not see frozen objects
            assert ref() is not None
            for _ in range(500):
                await asyncio.sleep(0.01)
                if ref() is None:
                    break
            return ref() is None
        finally:
            await keeper.stop()

    assert asyncio.run(run())
