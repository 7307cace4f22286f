"""The posix launcher's per-container supervisor ("nanny"); a standalone script.

Run as `python -s -S posix_nanny.py STATUS PID_FILE STDIN STDOUT STDERR CWD USER RLIMITS LC_CTYPE
-- ARGV`
with the container's environment, fd 0 the start gate and fd 1 a pipe to the
launcher. It imports nothing beyond what the interpreter has already loaded, so
it stays a few megabytes: it must outlive the agent, so it is paid per container.

It forks the container's first process, which becomes a session (and process
group) leader, opens its stdout/stderr and stdin ("-": /dev/null; a terminal
opened there becomes the session's controlling terminal), applies cwd, user and rlimits, and then
waits on the gate: one byte "1" lets it exec; EOF (the launcher went away
before `start`) makes it exit 1 without running anything. The nanny writes its own
and the child's pid files, reports the pid on fd 1, reaps the child and writes its raw
wait status to STATUS atomically, so the status survives an agent restart.
"""

import os
import sys

NANNY_PID_FILE = "nanny.pid"
ABORTED_EXIT_CODE = 1
EXEC_FAILED_EXIT_CODE = 127


def write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def apply_rlimits(spec: str) -> None:
    import resource  # only containers with rlimits pay for it

    for item in spec.split(","):
        name, soft, hard = item.split(":")
        unlimited = resource.RLIM_INFINITY
        resource.setrlimit(
            getattr(resource, "RLIMIT_" + name),
            (unlimited if soft == "inf" else int(soft), unlimited if hard == "inf" else int(hard)),
        )


def switch_user(name: str) -> None:
    import pwd

    entry = pwd.getpwnam(name)
    # The sandbox's stdout/stderr belong to the user, as the sandbox does.
    os.fchown(1, entry.pw_uid, entry.pw_gid)
    os.fchown(2, entry.pw_uid, entry.pw_gid)
    os.initgroups(name, entry.pw_gid)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.environ.setdefault("HOME", entry.pw_dir)
    os.environ.setdefault("USER", name)


def open_stdin(path: str) -> int:
    if path == "-":
        return os.open("/dev/null", os.O_RDONLY)
    fd = os.open(path, os.O_RDONLY)
    if os.isatty(fd):
        # A terminal is both ends; a FIFO must stay read-only or it never reaches EOF.
        os.close(fd)
        fd = os.open(path, os.O_RDWR)
    return fd


def child(
    stdin: str, stdout: str, stderr: str, cwd: str, user: str, rlimits: str, keep_lc_ctype: str,
    argv: list[str],
) -> None:
    os.setsid()
    if keep_lc_ctype != "1":
        # Python's C-locale coercion added it to our environment, not the container's.
        os.environ.pop("LC_CTYPE", None)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    os.dup2(os.open(stdout, flags, 0o644), 1)
    os.dup2(os.open(stderr, flags, 0o644), 2)
    try:
        source = open_stdin(stdin)
        os.chdir(cwd)
        if rlimits != "-":
            apply_rlimits(rlimits)
        if user != "-":
            switch_user(user)
    except Exception as exc:
        os.write(2, f"Failed to set up the container's process: {exc}\n".encode())
        os._exit(EXEC_FAILED_EXIT_CODE)
    if os.read(0, 1) != b"1":
        os._exit(ABORTED_EXIT_CODE)
    os.dup2(source, 0)
    os.close(source)
    try:
        os.execvpe(argv[0], argv, os.environ)
    except OSError as exc:
        os.write(2, f"Failed to execute '{argv[0]}': {exc.strerror}\n".encode())
    os._exit(EXEC_FAILED_EXIT_CODE)


def main() -> None:
    args = sys.argv[1:]
    separator = args.index("--")
    status_path, pid_path, stdin, stdout, stderr, cwd, user, rlimits, keep_lc_ctype = args[
        :separator
    ]
    argv = args[separator + 1 :]
    # Written here, not by the launcher: it exists even if the agent dies right now.
    write_atomically(
        os.path.join(os.path.dirname(status_path), NANNY_PID_FILE), b"%d\n" % os.getpid()
    )

    pid = os.fork()
    if pid == 0:
        child(stdin, stdout, stderr, cwd, user, rlimits, keep_lc_ctype, argv)
    # The gate belongs to the child alone: its EOF must follow the launcher's end.
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    write_atomically(pid_path, b"%d\n" % pid)
    os.write(1, b"%d\n" % pid)
    os.dup2(null, 1)
    os.close(null)
    _, status = os.waitpid(pid, 0)
    write_atomically(status_path, b"%d\n" % status)


main()
