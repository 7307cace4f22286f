"""TLS on every listener of the master and the agent, as libprocess's SSL sockets.

On with ``--ssl_cert_file`` and ``--ssl_key_file``, or Mesos's environment
(``LIBPROCESS_SSL_ENABLED=true`` with ``LIBPROCESS_SSL_CERT_FILE``,
``LIBPROCESS_SSL_KEY_FILE``); ``LIBPROCESS_SSL_CA_FILE`` (``--ssl_ca_file``)
is the CA clients verify the daemons with and, with
``LIBPROCESS_SSL_REQUIRE_CERT`` (``--ssl_require_cert``), the daemons their
clients' certificates. Plain HTTP stays the default. With TLS on, the agent
talks to its master over TLS and hands its executors the ``LIBPROCESS_SSL_*``
environment so that they reach it over TLS too (`client_from_environ`).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from mesilla.common.flags import Flag, FlagError, Flags

FLAGS: list[Flag] = [
    Flag(
        "ssl_cert_file",
        "TLS certificate (PEM) of every listener; with --ssl_key_file turns TLS on.",
        None,
        "path",
    ),
    Flag("ssl_key_file", "TLS private key (PEM) of --ssl_cert_file.", None, "path"),
    Flag("ssl_ca_file", "CA certificates (PEM) peers are verified with.", None, "path"),
    Flag(
        "ssl_require_cert", "Require clients to present a certificate signed by --ssl_ca_file.", False, "bool"
    ),
]


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class TlsConfig:
    cert_file: str
    key_file: str
    ca_file: str | None = None
    require_cert: bool = False

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.require_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        return client_context(self.ca_file, (self.cert_file, self.key_file))

    def environment(self) -> dict[str, str]:
        """What executors get to reach the agent over TLS (as Mesos's, the LIBPROCESS_SSL_* names)."""
        env = {"LIBPROCESS_SSL_ENABLED": "true"}
        if self.ca_file:
            env["LIBPROCESS_SSL_CA_FILE"] = self.ca_file
        if self.require_cert:
            env.update(LIBPROCESS_SSL_CERT_FILE=self.cert_file, LIBPROCESS_SSL_KEY_FILE=self.key_file)
        return env


def client_context(ca_file: str | None, certificate: tuple[str, str] | None = None) -> ssl.SSLContext:
    """Verifies the server with `ca_file` (else the system's CAs), presenting `certificate`."""
    context = ssl.create_default_context(cafile=ca_file)
    if certificate is not None:
        context.load_cert_chain(*certificate)
    return context


def from_flags(flags: Flags, environ: Mapping[str, str] | None = None) -> TlsConfig | None:
    env = os.environ if environ is None else environ
    enabled = _true(env.get("LIBPROCESS_SSL_ENABLED"))
    cert = flags.get("ssl_cert_file") or (env.get("LIBPROCESS_SSL_CERT_FILE") if enabled else None)
    key = flags.get("ssl_key_file") or (env.get("LIBPROCESS_SSL_KEY_FILE") if enabled else None)
    if not (cert or key or enabled):
        return None
    if not cert or not key:
        raise FlagError(
            "TLS needs both a certificate and its key: --ssl_cert_file and --ssl_key_file "
            "(or LIBPROCESS_SSL_CERT_FILE and LIBPROCESS_SSL_KEY_FILE)"
        )
    ca = flags.get("ssl_ca_file") or env.get("LIBPROCESS_SSL_CA_FILE") or None
    require = bool(flags.get("ssl_require_cert")) or _true(env.get("LIBPROCESS_SSL_REQUIRE_CERT"))
    if require and not ca:
        raise FlagError("--ssl_require_cert needs the CA clients are verified with: --ssl_ca_file")
    config = TlsConfig(cert, key, ca, require)
    try:
        config.server_context()
    except (OSError, ssl.SSLError) as exc:
        raise FlagError(f"Cannot load the TLS certificate '{cert}' and key '{key}': {exc}") from None
    return config


def client_from_environ(environ: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """An executor's TLS to its agent, from the LIBPROCESS_SSL_* its agent handed it."""
    env = os.environ if environ is None else environ
    if not _true(env.get("LIBPROCESS_SSL_ENABLED")):
        return None
    cert, key = env.get("LIBPROCESS_SSL_CERT_FILE"), env.get("LIBPROCESS_SSL_KEY_FILE")
    return client_context(env.get("LIBPROCESS_SSL_CA_FILE") or None, (cert, key) if cert and key else None)
