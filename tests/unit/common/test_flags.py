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
