"""The Mesos containerizer: launcher, provisioner and isolators (the engine seed).

Layout mirrors Mesos's `src/slave/containerizer/mesos/`:

* `containerizer.py`  the Containerizer (launch flow, wait, kill, destroy, recover)
* `launcher/`         how a container's first process is created (`posix`, `linux`)
* `isolators/<family>/<name>.py`  one isolator per file, selected by `--isolation`
* `provisioner/`      `stores/` (docker) and `backends/` (overlay, copy, bind)
* `types.py`          the shared data: ContainerConfig, ContainerLaunchInfo, ...
"""
