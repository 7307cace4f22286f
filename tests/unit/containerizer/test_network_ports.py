"""network/ports' port arithmetic and its view of the kernel's socket tables."""

from __future__ import annotations

import os
import socket

from mesilla.containerizer.isolators.network.ports import (
    as_ranges,
    listening_sockets,
    parse_range,
    process_tree,
    ranges_of,
    socket_inodes,
)
from mesilla.v1.mesos import Range, Ranges, Resource, ValueType


def test_ranges_round_trip() -> None:
    ports = parse_range("[31000-31002,31005]")
    assert ports == {31000, 31001, 31002, 31005}
    assert as_ranges(ports) == [Range(begin=31000, end=31002), Range(begin=31005, end=31005)]
    resource = Resource(name="ports", type=ValueType.RANGES, ranges=Ranges(range=as_ranges(ports)))
    assert ranges_of([resource]) == ports


def test_a_listening_socket_of_this_process_is_found_by_its_inode() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        inode = os.fstat(listener.fileno()).st_ino
        assert listening_sockets()[inode] == port
        assert inode in socket_inodes(os.getpid())
    assert os.getpid() in process_tree(os.getppid())
