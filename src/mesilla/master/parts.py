"""The parts of the master that its components share, handed over as one bundle.

`Master` builds one `Parts` and passes it to every component's constructor
(`Offerer`, `Tasks`, `Launcher`, `FrameworkStreams`, `AgentLinks`,
`StatusUpdates`, `Relay`), each of which keeps the parts it uses. The
components themselves (the offerer, the tasks, the framework streams) are
passed on their own, as each needs a different few.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from mesilla.common.tasks import TaskOwner
from mesilla.master.allocator import HierarchicalDRFAllocator
from mesilla.master.book import Book
from mesilla.master.outbox import Outbox
from mesilla.master.registry import Registry
from mesilla.v1.mesos import MasterInfo


@dataclass(frozen=True)
class Parts:
    #: Every index of the cluster's state; the components are its only writers.
    book: Book
    allocator: HierarchicalDRFAllocator
    #: Everything sent to frameworks, agents and observers.
    outbox: Outbox
    #: Mesos metric name -> count (``master/...``).
    counters: Counter[str]
    #: The durable state (frameworks and agents), written before it is acted on.
    registry: Registry
    #: Every background task of the master.
    owner: TaskOwner
    #: The master's `MasterInfo` as it is now (its address is known once the server is bound).
    master_info: Callable[[], MasterInfo]
    #: Whether `Master.stop` has begun: from then on a closing stream is the master's doing.
    stopping: Callable[[], bool]
