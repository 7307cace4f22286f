"""`mesilla-nested`: the CNI plugin that gives a pod a subport of its host's trunk.

Its network configuration names the network service's network and the agent
that serves this host's trunk::

    {"cniVersion": "1.0.0", "name": "tenant-a", "type": "mesilla-nested",
     "network_id": "<Neutron network id>", "agent_socket": "/run/mesilla/nested.sock"}

The plugin holds no credentials and does no plumbing: it forwards the
request (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and the
configuration) to its agent over that unix socket and prints the answer,
a result or a CNI error object (`mesilla.network.nested.cni` does the verbs).
It answers VERSION itself, and a CNI error when the agent cannot be reached.

It is a process per pod, so it starts as little as it can: the standard
library's C halves of `json` and `socket` only (the modules themselves
import `re` and `enum`, which cost this 2-core machine as much as the
interpreter's own start), and nothing of Mesilla.
"""

from __future__ import annotations

import _json
import _socket
import os
import sys

SUPPORTED_VERSIONS = ["0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]
AGENT_TIMEOUT = 60.0
ROUTE = "/v1/cni"
# CNI's well-known error codes.
INCOMPATIBLE_VERSION = 1
INVALID_ENVIRONMENT = 4
INVALID_CONFIG = 7
TRY_AGAIN = 11


class CniFailure(Exception):
    """What a CNI error object says (the plugin's own, or the agent's)."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details


class _Decoding:
    """What `_json`'s scanner reads its options from (json.decoder.JSONDecoder's defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float


def parse(text: str) -> object:
    """The JSON value of `text` (ValueError if it is not JSON)."""
    text = text.strip()
    try:
        # typeshed types the context as a scanner; any object with these attributes will do.
        value, end = _json.make_scanner(_Decoding())(text, 0)  # type: ignore[arg-type]
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def _string(value: str) -> str:
    return str(_json.encode_basestring_ascii(value))


def forward(socket_path: str, body: bytes) -> tuple[int, bytes]:
    """`POST /v1/cni` on the agent's socket: its status and body."""
    head = (f"POST {ROUTE} HTTP/1.1\r\nHost: mesilla-agent\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(AGENT_TIMEOUT)
        sock.connect(socket_path)
        sock.sendall(head + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError as exc:
        raise CniFailure(TRY_AGAIN, f"The mesilla agent at {socket_path} does not answer: {exc}") from None
    finally:
        sock.close()
    answer = b"".join(chunks)
    head, _, content = answer.partition(b"\r\n\r\n")
    try:
        return int(head.split(b"\r\n", 1)[0].split()[1]), content
    except (IndexError, ValueError):
        raise CniFailure(TRY_AGAIN, f"The mesilla agent at {socket_path} answered {answer[:100]!r}") from None


def request(command: str, conf: object, stdin: str, env: dict[str, str]) -> tuple[str, bytes]:
    """The agent's socket and the request for it: CNI_* of `env` and the configuration, as given."""
    socket_path = conf.get("agent_socket") if isinstance(conf, dict) else None
    if not isinstance(socket_path, str) or not socket_path:
        raise CniFailure(INVALID_CONFIG, "mesilla-nested needs 'agent_socket' in its network configuration")
    fields = {"command": command, "container_id": env.get("CNI_CONTAINERID", ""),
              "netns": env.get("CNI_NETNS", ""), "ifname": env.get("CNI_IFNAME", "")}  # fmt: skip
    body = ", ".join(f"{_string(k)}: {_string(v)}" for k, v in fields.items())
    return socket_path, f'{{{body}, "config": {stdin.strip()}}}'.encode()


def main() -> None:
    command = os.environ.get("CNI_COMMAND", "")
    if command == "VERSION":
        versions = ", ".join(map(_string, SUPPORTED_VERSIONS))
        print(f'{{"cniVersion": "1.0.0", "supportedVersions": [{versions}]}}')
        return
    stdin = sys.stdin.read()
    version = "1.0.0"
    try:
        try:
            conf = parse(stdin)
        except ValueError:
            raise CniFailure(INVALID_CONFIG, "The network configuration is not JSON") from None
        if isinstance(conf, dict) and isinstance(conf.get("cniVersion"), str):
            version = conf["cniVersion"]
        status, answer = forward(*request(command, conf, stdin, dict(os.environ)))
        if status not in (200, 400):
            raise CniFailure(TRY_AGAIN, f"The mesilla agent answered {status}: {answer[:200]!r}")
    except CniFailure as exc:
        print(f'{{"cniVersion": {_string(version)}, "code": {exc.code}, "msg": {_string(exc.msg)}}}')
        sys.exit(1)
    sys.stdout.write(answer.decode())
    if status == 400:
        sys.exit(1)  # a CNI error object, from the agent


if __name__ == "__main__":
    main()
