"""Linux control groups: where a container's cgroup is, and how to read and write it.

The layout follows Mesos: every container gets `<cgroups_root>/<id>` and a nested
container with its own cgroups (`LinuxInfo.share_cgroups` false) gets a child
directory of its parent's, `<cgroups_root>/<root id>/<child id>`. A nested
container that shares cgroups (the default) is accounted to its parent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mesilla.v1.mesos import ContainerID, ContainerInfo

# Tells whether a nested container shares its parent's cgroups; the callers
# (launcher, isolators) know the configs, this module does not.
SharesCgroups = Callable[[ContainerID], bool]


def shares_cgroups(container_info: ContainerInfo | None) -> bool:
    """Mesos's rule: a nested container shares its parent's cgroups unless told not to."""
    linux = container_info.linux_info if container_info is not None else None
    return linux is None or linux.share_cgroups is None or linux.share_cgroups


def cgroup_path(
    flags: Any,
    container_id: ContainerID,
    share_cgroups_of: SharesCgroups | None = None,
) -> str:
    """The cgroup of `container_id`, relative to a hierarchy's mount point.

    `share_cgroups_of` answers for nested containers; without it every nested
    container shares (the Mesos default). Top-level containers never share.
    """
    shares = share_cgroups_of or (lambda _cid: True)
    own = container_id
    while own.parent is not None and shares(own):
        own = own.parent
    chain: list[str] = []
    node: ContainerID | None = own
    while node is not None:
        chain.append(node.value)
        node = node.parent
    root = str(flags.cgroups_root).strip("/")
    return "/".join([root, *reversed(chain)])
