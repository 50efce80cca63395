#!/usr/bin/env bash
# A Docker registry (Debian's docker-registry: Distribution 2.8) for the demo's "My images".
#
#   scripts/registry.sh start [--dir DIR] [--addr HOST:PORT]   start (or reuse) it; prints ADDR=...
#   scripts/registry.sh stop  [--dir DIR]                      stop it
#
# DIR (default .demo/registry) holds its config, storage, pidfile and log. ADDR (default
# 10.250.0.1:5000, the test cluster's site address, which the nodes' engines reach from
# their namespaces and trust as an insecure registry) must be an address the nodes reach.
# Deletes are enabled (the hub deletes images users delete). No authentication: DEMO ONLY;
# the node firewall keeps user containers away from the site address's other ports.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$REPO/.demo/registry
ADDR=10.250.0.1:5000
BINARY=/usr/bin/docker-registry

log() { printf '[registry] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

action=${1:-}
shift || true
while (($#)); do
  case $1 in
    --dir) DIR=$2; shift 2 ;;
    --addr) ADDR=$2; shift 2 ;;
    *) die "unknown option: $1" ;;
  esac
done
[[ $ADDR =~ ^[0-9.]+:[0-9]+$ ]] || die "--addr must be IPv4:PORT, not '$ADDR'"
mkdir -p "$DIR/storage"
DIR=$(cd "$DIR" && pwd)
PIDFILE=$DIR/registry.pid

alive() {  # our registry runs with this pid (a stale pidfile after a reboot is not trusted)
  [[ -n ${1:-} ]] && [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q "$DIR/config.yml"
}

answers() { curl -fsS -m 2 "http://$ADDR/v2/" >/dev/null 2>&1; }

case $action in
  start)
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if alive "$pid" && answers; then
      echo "ADDR=$ADDR"; exit 0
    fi
    [[ -f $PIDFILE ]] && { log "removing stale pidfile (pid ${pid:-?})"; rm -f "$PIDFILE"; }
    if [[ ! -x $BINARY ]]; then
      log "installing docker-registry"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null \
        || die "apt-get install docker-registry failed"
    fi
    cat >"$DIR/config.yml" <<YAML
version: 0.1
log: {level: info}
storage:
  filesystem: {rootdirectory: $DIR/storage}
  delete: {enabled: true}
http:
  addr: $ADDR
YAML
    setsid "$BINARY" serve "$DIR/config.yml" >>"$DIR/registry.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 50); do answers && { log "listening on $ADDR ($DIR)"; echo "ADDR=$ADDR"; exit 0; }; sleep 0.2; done
    tail -20 "$DIR/registry.log" >&2
    die "the registry did not answer on $ADDR"
    ;;
  stop)
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if alive "$pid"; then kill "$pid"; log "stopped (pid $pid)"; fi
    rm -f "$PIDFILE"
    ;;
  *) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
