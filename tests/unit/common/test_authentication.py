"""Mesos's credentials files and the Basic authenticator's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mesilla.common.authentication import (
    CredentialsError,
    master_authentication,
    read_credential,
    read_credentials,
)
from mesilla.common.flags import FlagError, parse
from mesilla.master.main import MASTER_FLAGS


def test_json_text_inline_and_file_url_credentials(tmp_path: Path) -> None:
    as_json = tmp_path / "creds.json"
    as_json.write_text(
        json.dumps({"credentials": [{"principal": "a", "secret": "s1"}, {"principal": "b", "secret": "s2"}]})
    )
    as_text = tmp_path / "creds.txt"
    as_text.write_text("a s1\n\nb   s2\n")
    expected = {"a": "s1", "b": "s2"}
    assert read_credentials(str(as_json)) == expected
    assert read_credentials(f"file://{as_json}") == expected
    assert read_credentials(str(as_text)) == expected
    assert read_credentials(as_json.read_text()) == expected


def test_one_credential_for_the_agent(tmp_path: Path) -> None:
    as_json = tmp_path / "c.json"
    as_json.write_text('{"principal": "agent", "secret": "s"}')
    as_text = tmp_path / "c.txt"
    as_text.write_text("agent s\n")
    assert read_credential(str(as_json)) == read_credential(str(as_text)) == ("agent", "s")


@pytest.mark.parametrize(
    "text",
    ['{"credentials": {}}', '{"credentials": [{"secret": "x"}]}', "a b c\n", '{"credentials": [1]}'],
)
def test_malformed_credentials_are_refused_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad"
    path.write_text(text)
    with pytest.raises(CredentialsError) as err:
        read_credentials(str(path))
    assert str(path) in str(err.value)


def test_missing_file_is_a_flag_error(tmp_path: Path) -> None:
    with pytest.raises(FlagError, match="Cannot read --credentials file"):
        read_credentials(str(tmp_path / "none"))


def test_switch_without_credentials_refuses_to_start(tmp_path: Path) -> None:
    flags = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", "--authenticate_http_readonly"], environ={})
    with pytest.raises(FlagError, match="No credentials provided"):
        master_authentication(flags)


def test_flags_show_the_path_and_never_inline_secrets(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    path.write_text('{"credentials": [{"principal": "p", "secret": "hidden"}]}')
    by_file = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", f"--credentials=file://{path}"], environ={})
    assert by_file.as_strings()["credentials"] == str(path)
    inline = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", f"--credentials={path.read_text()}"], environ={})
    assert "hidden" not in json.dumps(inline.as_strings())


def test_unknown_http_authenticator_is_refused(tmp_path: Path) -> None:
    flags = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", "--http_authenticators=custom"], environ={})
    with pytest.raises(FlagError, match="Unknown --http_authenticators custom"):
        master_authentication(flags)


def test_authenticators_takes_crammd5_and_refuses_others(tmp_path: Path) -> None:
    crammd5 = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", "--authenticators=crammd5"], environ={})
    master_authentication(crammd5)
    assert parse(MASTER_FLAGS, [f"--work_dir={tmp_path}"], environ={}).get("authenticators") == "crammd5"
    other = parse(MASTER_FLAGS, [f"--work_dir={tmp_path}", "--authenticators=kerberos"], environ={})
    with pytest.raises(FlagError, match="Unknown --authenticators kerberos: Mesilla has crammd5"):
        master_authentication(other)
