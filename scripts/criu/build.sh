#!/usr/bin/env bash
# Builds and installs CRIU 4.1.1 (/usr/local/sbin/criu) for suspend-instead-of-stop
# (docs/culler.md, "Suspend"), unless a CRIU that passes `criu check` is already first on
# PATH. Idempotent; about 30 s on 2 cores.
#
# Why not Debian 12's criu (3.17.1): on Linux 6.13 and later it fails before doing
# anything ("vdso: Unexpected rt vDSO area bounds", checkpoint-restore/criu#2532, fixed in
# 4.1). Debian 13's package needs glibc 2.38, so the source Debian 13 ships is built here,
# with two patches (this folder):
#   0001: where the bounding set lacks CAP_SYS_RESOURCE (this test machine), prlimit() on
#         another uid's task is refused; the same values are read from /proc/PID/limits.
#   0002: Linux 6.16+ answers EOPNOTSUPP to SO_PASSCRED/SO_PASSSEC on sockets other than
#         unix/netlink (a JupyterLab server's TCP sockets); they are off there.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VERSION=4.1.1
SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PREFIX=/usr/local/sbin
log() { printf '[criu] %s\n' "$*" >&2; }

# Docker (runc) passes CRIU the options of this file at every checkpoint and restore:
# - tcp-established: a server's established TCP connections are dumped (a kernel's to its
#   server, on the container's loopback; the hub's and the proxy's, on its address);
# - tcp-close: they are restored closed, not bound to the address the container had. The
#   engine gives a restored container whatever address is free then (the one it had may
#   be another container's by then: the restore would fail, "criu failed: type NOTIFY");
#   the server's listening sockets are restored as they were, its kernels' connections
#   reconnect, and so do the browser's (docs/culler.md, "Suspend instead of stop").
runc_conf() {
  mkdir -p /etc/criu
  local option
  for option in tcp-established tcp-close; do
    grep -qx "$option" /etc/criu/runc.conf 2>/dev/null || echo "$option" >>/etc/criu/runc.conf
  done
}

if [[ -x $PREFIX/criu ]] && "$PREFIX/criu" --version 2>/dev/null | grep -q "Version: $VERSION" \
    && "$PREFIX/criu" check >/dev/null 2>&1; then
  runc_conf
  exit 0
fi
log "building CRIU $VERSION (Debian 12's criu cannot run on this kernel)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends build-essential pkg-config libprotobuf-dev \
  libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf libnl-3-dev \
  libnet1-dev libcap-dev libbsd-dev libgnutls28-dev libnftables-dev uuid-dev libaio-dev \
  curl xz-utils >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=$work/criu_$VERSION.orig.tar.xz
curl -fsSL -o "$tarball" "$MIRROR/pool/main/c/criu/criu_$VERSION.orig.tar.xz"
echo "$SHA256  $tarball" | sha256sum -c --quiet -
tar -C "$work" -xf "$tarball"
cd "$work/criu-$VERSION"
for p in "$HERE"/*.patch; do patch -s -p1 <"$p"; done
make -s -j"$(nproc)" criu >/dev/null
install -m 0755 criu/criu "$PREFIX/criu"
runc_conf
"$PREFIX/criu" check >/dev/null
log "installed $("$PREFIX/criu" --version | head -1) at $PREFIX/criu"
