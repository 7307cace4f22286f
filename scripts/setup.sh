#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian 12 machine, as root: the system packages
# Mesilla runs on, a virtualenv in .venv with the package and its test tools,
# and the pymesos client the acceptance checks use.
set -euo pipefail
cd "$(dirname "$0")/.."

# runc/crun: OCI runtimes for the linux launcher; conmon: its per-container monitor; tini: pid 1 of containers; busybox-static: test images;
# docker-registry: the registry image tests pull from; iproute2: network
# namespaces; gcc + python3-dev: pymesos's http-parser builds from source;
# openvswitch-switch: the nested networks' switches (Mesilla starts its own daemons); tcpdump: their tests' captures;
# protobuf-compiler + libprotobuf-dev + the mesos-go and gogo sources: protoc
# compiles Mesos's .proto files (as mesos-go ships them) for the protobuf encoding;
# golang-go builds tests/compat's mesos-go clients from those sources.
APT_PACKAGES=(runc crun conmon tini busybox-static docker-registry iproute2 gcc python3-dev python3-venv procps containernetworking-plugins iptables
  openvswitch-switch tcpdump protobuf-compiler libprotobuf-dev golang-github-mesos-mesos-go-dev golang-github-gogo-protobuf-dev golang-go)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "setup: Mesilla needs Python >= 3.11 ($PYTHON is older)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# Mesos's messages for the protobuf encoding: descriptor sets compiled by protoc,
# not committed (src/mesilla/v1/proto/build.py; the package builds them when missing).
.venv/bin/python -m mesilla.v1.proto.build
# An editable install leaves the package uncompiled, and with PYTHONDONTWRITEBYTECODE
# set (as on some CI hosts) every process would compile it again: each pod's
# executor paid ~30-100 ms for that. Bytecode as a wheel install has it; Python
# ignores it for a source file edited later.
.venv/bin/python -m compileall -q src/mesilla >/dev/null

# The shared acceptance checks (../shared, where present) drive Mesilla with pymesos, an unmodified Mesos client;
# tests/compat installs its own clients.
SHARED="${MESILLA_SHARED:-$(cd .. && pwd)/shared}"
if [ -x "$SHARED/acceptance/install_pymesos.sh" ] || [ -f "$SHARED/acceptance/install_pymesos.sh" ]; then
  PYMESOS_VENV="${PYMESOS_VENV:-/tmp/acceptance-pymesos}" bash "$SHARED/acceptance/install_pymesos.sh" >/dev/null
fi
# ... and with mesos-go (Debian's golang package and mesos-go 0.0.6, built offline).
if [ -f "$SHARED/acceptance/mesos-go/install_mesos_go.sh" ]; then
  bash "$SHARED/acceptance/mesos-go/install_mesos_go.sh" >/dev/null
fi
echo "setup: ready (.venv/bin/mesilla)"
