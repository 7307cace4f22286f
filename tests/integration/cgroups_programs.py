"""Programs that push a container against its cgroup limits, shared by the cgroups tests."""

# Forks until the pids controller refuses, then writes "<children forked> <errno>"
# to the file named by its first argument; it and its children then wait to be killed.
FORK_BOMB = """
import os, sys, time
forked = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        with open(sys.argv[1], "w") as report:
            report.write(f"{forked} {exc.errno}\\n")
        break
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    forked += 1
time.sleep(1000)
"""
