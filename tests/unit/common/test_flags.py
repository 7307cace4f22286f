import pytest

from mesilla.common.durations import format_duration, parse_duration
from mesilla.common.flags import Flag, FlagError, parse

SPECS = [
    Flag("port", "", 5050, "int"),
    Flag("work_dir", "", required=True),
    Flag("strict", "", True, "bool"),
    Flag("heartbeat_interval", "", 15.0, "duration"),
    Flag("isolation", "", None, "list"),
]


def test_command_line_environment_and_defaults() -> None:
    flags = parse(SPECS, ["--work_dir=/tmp/x", "--no-strict", "--heartbeat_interval=2mins"],
                  {"MESILLA_PORT": "6000", "MESILLA_WORK_DIR": "/ignored"})
    assert flags.port == 6000
    assert flags.work_dir == "/tmp/x"  # the command line wins over the environment
    assert flags.strict is False
    assert flags.heartbeat_interval == 120.0
    assert flags.as_strings()["heartbeat_interval"] == "2mins"


def test_file_values(tmp_path) -> None:
    (tmp_path / "iso").write_text("cgroups/cpu,cgroups/mem\n")
    flags = parse(SPECS, [f"--isolation=file://{tmp_path}/iso", "--work_dir=w"], {})
    assert flags.isolation == ["cgroups/cpu", "cgroups/mem"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bogus=1", "--work_dir=w"], "Unknown flag '--bogus'"),
        ([], "--work_dir"),
        (["--work_dir=w", "--port=abc"], "flag 'port'"),
        (["--work_dir=w", "--port"], "needs a value"),
        (["--work_dir=w", "--heartbeat_interval=5"], "invalid duration"),
        (["work_dir"], "Unexpected argument"),
    ],
)
def test_bad_flags_name_the_problem(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=message):
        parse(SPECS, argv, {})


@pytest.mark.parametrize("text, seconds", [("5secs", 5), ("100ms", 0.1), ("1.5mins", 90), ("2hrs", 7200)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_mesos_environment_names_with_mesilla_s_winning() -> None:
    flags = parse(SPECS, [], {"MESOS_WORK_DIR": "/m", "MESOS_PORT": "7000", "MESILLA_PORT": "6000"})
    assert flags.work_dir == "/m"
    assert flags.port == 6000


def test_mesos_flags_without_effect_are_accepted_and_listed() -> None:
    flags = parse(
        SPECS,
        ["--work_dir=w", "--max_completed_frameworks=5", "--no-log_auto_initialize"],
        {"MESOS_QUORUM": "2", "MESOS_NOT_A_FLAG": "x"},
        accepted={"max_completed_frameworks", "log_auto_initialize", "quorum"},
    )
    assert flags.without_effect == {
        "log_auto_initialize": "false", "max_completed_frameworks": "5", "quorum": "2"
    }
    assert "quorum" not in flags.as_strings()


def test_deprecated_names_mean_their_successors() -> None:
    flags = parse(SPECS, ["--work_dir=w", "--slave_port=6001"], {}, aliases={"slave_port": "port"})
    assert flags.port == 6001


def test_an_unknown_flag_names_the_closest_known_ones() -> None:
    with pytest.raises(FlagError, match=r"Unknown flag '--work_dri'; did you mean --work_dir\?"):
        parse(SPECS, ["--work_dri=x"], {})


def test_every_mesos_master_and_agent_flag_starts_the_daemon_with_a_warning() -> None:
    from mesilla.cli import _daemon_flags
    from mesilla.common import mesos_flags

    for kind, names in (("master", mesos_flags.MASTER), ("agent", mesos_flags.AGENT)):
        specs, accepted = _daemon_flags(kind)
        argv = ["--work_dir=/w", "--master=127.0.0.1:5050"] if kind == "agent" else ["--work_dir=/w"]
        flags = parse(specs, [*argv, *(f"--{n}=1" for n in sorted(accepted))], {},
                      accepted=accepted, aliases=mesos_flags.DEPRECATED)  # fmt: skip
        assert list(flags.without_effect) == sorted(accepted)
        assert names <= {s.name for s in specs} | accepted
    # Mesos's old names reach the flags Mesilla implements.
    specs, accepted = _daemon_flags("master")
    flags = parse(specs, ["--work_dir=/w", "--slave_ping_timeout=3secs"], {},
                  accepted=accepted, aliases=mesos_flags.DEPRECATED)  # fmt: skip
    assert flags.agent_ping_timeout == 3.0


def test_security_flags_without_effect_refuse_to_start_rather_than_run_open() -> None:
    from mesilla.cli import _daemon_flags, _refuse_unsafe_to_ignore
    from mesilla.common import mesos_flags

    specs, accepted = _daemon_flags("master")

    def check(*argv: str) -> None:
        flags = parse(specs, ["--work_dir=/w", *argv], {}, accepted=accepted, aliases=mesos_flags.DEPRECATED)
        _refuse_unsafe_to_ignore(flags)

    # Each only while Mesilla lacks it (`accepted` holds what it does not implement).
    for name, arg in (("authenticate_frameworks", "--authenticate"), ("acls", "--acls=/etc/acls.json")):
        if name in accepted:
            with pytest.raises(FlagError, match="would leave the daemon open"):
                check(arg)
    check("--no-authenticate_frameworks", "--quorum=1")
