#!/usr/bin/env bash
# Local test/demo cluster for jupyterhub-gpu. Idempotent: installs what is missing,
# starts what is stopped, rebuilds an image only when its Dockerfile changed.
#
#   scripts/cluster.sh up [N]   install packages, start N engines (default 1, max 3), build images
#   scripts/cluster.sh down     stop the engines (image data is kept)
#   scripts/cluster.sh status   show the engines
#   scripts/cluster.sh stop-node NODE | start-node NODE   one engine (failure tests)
#
# Each engine is a simulated GPU node: node-a, node-b, node-c, listening on a unix
# socket under $JHGPU_STATE/engines/<node>/ and on tcp://127.0.0.{2,3,4}:2375 (loopback
# only; this is a test cluster). Engines run with --bridge=none --iptables=false; user
# containers use host networking. The engines get the TEST-ONLY nvidia hook stand-in on
# their PATH (tests/cluster/fake-nvidia) so they accept GPU DeviceRequests without a GPU.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${JHGPU_STATE:-/var/lib/jupyterhub-gpu-test}
NODES=(node-a node-b node-c)
BASE_IMAGE=jupyterhub-gpu/base:bookworm
TEST_IMAGE=jupyterhub-gpu/singleuser-test:6.1.1
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf '[cluster] %s\n' "$*" >&2; }
sock() { echo "$STATE/engines/$1/docker.sock"; }
dk() { local node=$1; shift; docker -H "unix://$(sock "$node")" "$@"; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v slapd >/dev/null || missing+=(slapd)
  command -v ldapadd >/dev/null || missing+=(ldap-utils)
  command -v openssl >/dev/null || missing+=(openssl) # the LDAP TLS tests make a test CA
  command -v chromium >/dev/null || missing+=(chromium)
  command -v node >/dev/null || missing+=(nodejs npm)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  command -v docker >/dev/null || { log "no docker client after install"; exit 1; }
  if ! command -v configurable-http-proxy >/dev/null; then
    log "installing configurable-http-proxy (npm)"
    npm install -g --silent configurable-http-proxy@4 >/dev/null
  fi
}

engine_alive() {
  local pidfile="$STATE/engines/$1/docker.pid"
  [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start_engine() {
  local node=$1 addr=$2 dir="$STATE/engines/$1"
  mkdir -p "$dir/data" "$dir/exec" "$STATE/hook"
  if engine_alive "$node" && dk "$node" info >/dev/null 2>&1; then
    log "$node: running"
    return
  fi
  # a killed dockerd leaves its pidfile and socket behind: clear stale ones
  rm -f "$dir/docker.pid" "$dir/docker.sock" "$dir/exec/containerd/containerd.pid"
  install -m 0755 "$REPO/tests/cluster/fake-nvidia/nvidia-container-runtime-hook" "$STATE/hook/"
  log "$node: starting dockerd (tcp://$addr:2375, $dir)"
  PATH="$STATE/hook:$PATH" setsid dockerd \
    --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
    -H "unix://$dir/docker.sock" -H "tcp://$addr:2375" \
    >"$dir/dockerd.log" 2>&1 </dev/null 9>&- &  # 9>&-: the daemon must not keep the set-up lock
  for _ in $(seq 1 120); do
    dk "$node" info >/dev/null 2>&1 && { log "$node: ready"; return; }
    sleep 0.5
  done
  log "$node: dockerd did not come up; last log lines:"; tail -20 "$dir/dockerd.log" >&2; exit 1
}

build_base() {
  local node=$1
  dk "$node" image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  local rootfs="$STATE/rootfs-bookworm"
  if [[ ! -f $rootfs/.complete ]]; then
    log "debootstrap bookworm (minbase + python3) into $rootfs"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$rootfs" "$DEBIAN_MIRROR" >"$STATE/debootstrap.log" 2>&1 \
      || { tail -20 "$STATE/debootstrap.log" >&2; exit 1; }
    touch "$rootfs/.complete"
  fi
  log "$node: importing $BASE_IMAGE"
  tar -C "$rootfs" --exclude=./.complete -c . | dk "$node" import - "$BASE_IMAGE" >/dev/null
}

build_test_image() {
  local node=$1 ctx hash
  hash=$(cat "$REPO/images/singleuser-test/Dockerfile" | sha256sum | cut -c1-16)
  if [[ $(dk "$node" image inspect -f '{{index .Config.Labels "jupyterhub-gpu.build"}}' \
          "$TEST_IMAGE" 2>/dev/null) == "$hash" ]]; then
    return
  fi
  log "$node: building $TEST_IMAGE"
  ctx=$(mktemp -d)
  cp "$REPO/images/singleuser-test/Dockerfile" "$ctx/"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  dk "$node" build -q --network host --label "jupyterhub-gpu.build=$hash" \
    -t "$TEST_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
}

build_catalog_image() {  # the catalog's CPU image, built the way a site builds its images
  local node=$1 image=jupyterhub-gpu/python-cpu:3.11-bookworm py=python3
  dk "$node" image inspect "$image" >/dev/null 2>&1 && return
  [[ -x $REPO/.venv/bin/python ]] && py=$REPO/.venv/bin/python
  log "$node: building $image with images/build.py (--minimal, on the local base)"
  DOCKER_HOST="unix://$(sock "$node")" "$py" "$REPO/images/build.py" --only python-cpu \
    --base "$BASE_IMAGE" --minimal --pip-cert /etc/ssl/certs/ca-certificates.crt \
    --network host --quiet >"$STATE/build-python-cpu.log" 2>&1 \
    || { tail -30 "$STATE/build-python-cpu.log" >&2; exit 1; }
}

copy_image() {  # copy_image IMAGE FROM TO
  local image=$1 from=$2 to=$3 want
  want=$(dk "$from" image inspect -f '{{.Id}}' "$image")
  [[ $(dk "$to" image inspect -f '{{.Id}}' "$image" 2>/dev/null) == "$want" ]] && return
  log "$to: loading $image from $from"
  dk "$from" save "$image" | dk "$to" load -q >/dev/null
}

cmd_up() {
  local n=${1:-1}
  ((n >= 1 && n <= ${#NODES[@]})) || { log "N must be 1-${#NODES[@]}"; exit 2; }
  mkdir -p "$STATE"
  install_packages
  for i in $(seq 0 $((n - 1))); do start_engine "${NODES[$i]}" "127.0.0.$((i + 2))"; done
  build_base node-a
  build_test_image node-a
  build_catalog_image node-a
  for i in $(seq 1 $((n - 1))); do copy_image "$TEST_IMAGE" node-a "${NODES[$i]}"; done
  log "up: ${NODES[*]:0:$n}"
}

stop_engine() {
  local node=$1 pidfile="$STATE/engines/$1/docker.pid"
  if engine_alive "$node"; then
    log "$node: stopping"
    kill "$(cat "$pidfile")"
    for _ in $(seq 1 120); do engine_alive "$node" || break; sleep 0.25; done
  fi
}

node_index() {
  local i
  for i in "${!NODES[@]}"; do [[ ${NODES[$i]} == "$1" ]] && { echo "$i"; return; }; done
  log "unknown node $1 (one of ${NODES[*]})"; exit 2
}

cmd_down() {
  for node in "${NODES[@]}"; do stop_engine "$node"; done
}

cmd_status() {
  for node in "${NODES[@]}"; do
    if engine_alive "$node"; then echo "$node: running unix://$(sock "$node")"; else echo "$node: stopped"; fi
  done
}

# one set-up at a time on this machine (parallel test sessions share the engines)
mkdir -p "$STATE"
exec 9>"$STATE/.cluster.lock"
flock 9

case "${1:-up}" in
  up) shift || true; cmd_up "$@" ;;
  down) cmd_down ;;
  stop-node) stop_engine "$2" ;;
  start-node) i=$(node_index "$2"); start_engine "$2" "127.0.0.$((i + 2))" ;;
  status) cmd_status ;;
  *) echo "usage: $0 up [N] | down | status | stop-node NODE | start-node NODE" >&2; exit 2 ;;
esac
