#!/usr/bin/env bash
# Local test/demo cluster for jupyterhub-gpu. Idempotent: installs what is missing,
# starts what is stopped, rebuilds an image only when its Dockerfile, images/common or
# its build arguments changed.
#
#   scripts/cluster.sh up [N]   install packages, start N nodes (default 1, max 3), build images
#   scripts/cluster.sh down     stop the engines (image data is kept)
#   scripts/cluster.sh status   show the engines
#   scripts/cluster.sh stop-node NODE | start-node NODE   one engine (failure tests)
#
# Each simulated GPU node (node-a, node-b, node-c) is a network namespace of its own
# (`ip netns` jhgpu-node-X) with its own loopback, iptables and a veth link to this
# machine: the node's address is 10.250.N.2, this machine's end 10.250.N.1. Its own
# dockerd runs inside the namespace with the bridge and iptables ON (containers get the
# user bridge that the hub creates, never the node's network), with --experimental (docker
# checkpoint and restore: test_suspend), and listens on a unix
# socket under $JHGPU_STATE/engines/<node>/; node-c also listens on tcp://10.250.3.2:2376
# with TLS client certificates from a test CA ($JHGPU_STATE/tls). No engine listens on
# plain TCP. The hub, its proxy and LDAP stay in this machine's namespace, as on a real
# site; the nodes reach the hub at the site address 10.250.0.1 (on this machine's lo).
# Every node gets the node firewall (scripts/node-firewall.sh) for the user bridge.
#
# Images are built by a builder engine in this machine's namespace (the nodes have no
# route to the package registries) and loaded into the nodes (docker save | load).
# The engines get the TEST-ONLY nvidia hook stand-in on their PATH
# (tests/cluster/fake-nvidia) so they accept GPU DeviceRequests without a GPU.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${JHGPU_STATE:-/var/lib/jupyterhub-gpu-test}
NODES=(node-a node-b node-c)
TLS_NODE=node-c
SITE_ADDRESS=10.250.0.1
USER_BRIDGE=jhgpu-users   # GPUDockerSpawner.user_bridge's default
# The hub APIs the user servers may reach on the site address, and nothing else there:
# the demo hub's (scripts/demo/jupyterhub_config.py) and the test hubs' (tests/support/hub.py)
DEMO_HUB_API_PORT=8081
TEST_HUB_API_PORTS=20000-20999
BASE_IMAGE=jupyterhub-gpu/base:bookworm
TEST_IMAGE=jupyterhub-gpu/singleuser-test:6.1.1
CPU_IMAGE=jupyterhub-gpu/python-cpu:3.11-bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf '[cluster] %s\n' "$*" >&2; }
sock() { echo "$STATE/engines/$1/docker.sock"; }
dk() { local node=$1; shift; docker -H "unix://$(sock "$node")" "$@"; }
netns() { echo "jhgpu-$1"; }
node_address() { echo "10.250.$(($(node_index "$1") + 1)).2"; }

node_index() {
  local i
  for i in "${!NODES[@]}"; do [[ ${NODES[$i]} == "$1" ]] && { echo "$i"; return; }; done
  log "unknown node $1 (one of ${NODES[*]})"; exit 2
}

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v nsenter >/dev/null || missing+=(util-linux)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v slapd >/dev/null || missing+=(slapd)
  command -v ldapadd >/dev/null || missing+=(ldap-utils)
  command -v openssl >/dev/null || missing+=(openssl) # test CAs (LDAP and Docker TLS)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v node >/dev/null || missing+=(nodejs npm)
  command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
    || missing+=(postgresql) # accounting tests against a real PostgreSQL
  command -v prometheus >/dev/null || missing+=(prometheus) # dashboard/alert queries (test_grafana)
  # a real registry (Distribution 2.8) that saved images are pushed to (test_save_engine)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v ssh >/dev/null || missing+=(openssh-client) # the SSH gateway's real client (test_ssh)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  no_registry_service
  "$REPO/scripts/criu/build.sh"  # checkpoint/restore of servers (test_suspend, docs/culler.md)
  command -v docker >/dev/null || { log "no docker client after install"; exit 1; }
  if ! command -v configurable-http-proxy >/dev/null; then
    log "installing configurable-http-proxy (npm)"
    npm install -g --silent configurable-http-proxy@4 >/dev/null
  fi
}

no_registry_service() {  # Debian's docker-registry enables a system registry on :5000 (all
  # addresses); the tests start their own on the site address, so none runs as a service
  [[ -e /etc/systemd/system/multi-user.target.wants/docker-registry.service ]] \
    || ls /etc/rc[2-5].d/S*docker-registry >/dev/null 2>&1 || return 0
  log "disabling the docker-registry system service (tests start their own registries)"
  if [[ -d /run/systemd/system ]]; then
    systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
  else
    deb-systemd-helper disable docker-registry.service >/dev/null 2>&1 || true
    if [[ -x /etc/init.d/docker-registry ]]; then
      /etc/init.d/docker-registry stop >/dev/null 2>&1 || true
    fi
  fi
  update-rc.d docker-registry disable >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------- network namespaces
site_address() {  # the hub's address as the nodes see it
  ip -br addr show dev lo | grep -qw "$SITE_ADDRESS/32" || ip addr add "$SITE_ADDRESS/32" dev lo
}

setup_netns() {  # setup_netns NODE: namespace, veth, addresses, default route to this machine
  local node=$1 ns vh vn n
  ns=$(netns "$node"); vh="vh-$node"; vn="vn-$node"; n=$(($(node_index "$node") + 1))
  [[ -e /var/run/netns/$ns ]] || ip netns add "$ns"
  if ! ip link show "$vh" >/dev/null 2>&1; then
    ip -n "$ns" link del "$vn" 2>/dev/null || true
    ip link add "$vh" type veth peer name "$vn"
    ip link set "$vn" netns "$ns"
  fi
  ip addr replace "10.250.$n.1/30" dev "$vh"
  ip link set "$vh" up
  ip -n "$ns" addr replace "10.250.$n.2/30" dev "$vn"
  ip -n "$ns" link set "$vn" up
  ip -n "$ns" link set lo up
  ip -n "$ns" route replace default via "10.250.$n.1"
}

# ---------------------------------------------------------------- TLS (test CA)
make_tls() {  # a test CA, a server certificate for the TLS node, a client certificate for the hub
  local d="$STATE/tls" addr
  [[ -f $d/.complete ]] && return
  addr=$(node_address "$TLS_NODE")
  log "making a test CA and certificates for $TLS_NODE's Docker API ($d)"
  rm -rf "$d"; mkdir -p "$d"; chmod 700 "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=jupyterhub-gpu test CA" \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$TLS_NODE" \
      -keyout "$TLS_NODE-key.pem" -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth\n' "$addr" "$TLS_NODE" >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile server.ext -out "$TLS_NODE-cert.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=hub" -keyout hub-key.pem -out hub.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in hub.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile client.ext -out hub-cert.pem 2>/dev/null
    rm -f ./*.csr ./*.ext
    chmod 600 ./*-key.pem
  )
  touch "$d/.complete"
}

# ---------------------------------------------------------------- engines
pid_of() { cat "$STATE/engines/$1/docker.pid" 2>/dev/null || true; }

engine_alive() {
  local pid; pid=$(pid_of "$1")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

in_its_netns() {  # the running dockerd of NODE is inside the node's namespace
  [[ $1 == builder ]] && return 0
  [[ $(ip netns identify "$(pid_of "$1")" 2>/dev/null) == "$(netns "$1")" ]]
}

wait_engine() {
  local node=$1 dir="$STATE/engines/$1"
  for _ in $(seq 1 120); do
    dk "$node" info >/dev/null 2>&1 && { log "$node: ready"; return; }
    sleep 0.5
  done
  log "$node: dockerd did not come up; last log lines:"; tail -20 "$dir/dockerd.log" >&2; exit 1
}

prepare_engine_dir() {  # returns 1 when the engine already runs as it should
  local node=$1 dir="$STATE/engines/$1"
  mkdir -p "$dir/data" "$dir/exec" "$STATE/hook"
  # the hook is looked up at every GPU container's start: a running engine gets a new one too
  install -m 0755 "$REPO/tests/cluster/fake-nvidia/nvidia-container-runtime-hook" "$STATE/hook/"
  if engine_alive "$node" && dk "$node" info >/dev/null 2>&1; then
    if [[ $node != builder && $(dk "$node" info -f '{{.ExperimentalBuild}}') != true ]]; then
      log "$node: running without checkpoint/restore (an older set-up); restarting it"
      stop_engine "$node"
    else
      in_its_netns "$node" && { log "$node: running"; return 1; }
      log "$node: running outside its network namespace (an older set-up); restarting it"
      stop_engine "$node"
    fi
  fi
  # a killed dockerd leaves its pidfile and socket behind: clear stale ones
  rm -f "$dir/docker.pid" "$dir/docker.sock" "$dir/exec/containerd/containerd.pid"
}

no_inherited_fds() {  # run "$@" with no descriptor above 2: a daemon must keep no lock of
  # its caller's (the set-up lock on fd 9, or a `flock LOCK pytest ...` of whoever restarted
  # it: that lock would then be held for the daemon's whole life)
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    ((fd > 2)) && eval "exec $fd>&-"
  done
  exec "$@"
}

start_builder() {  # image builds only: this machine's namespace, no network for containers
  local dir="$STATE/engines/builder"
  prepare_engine_dir builder || return 0
  log "builder: starting dockerd ($dir)"
  no_inherited_fds setsid dockerd --bridge=none --iptables=false --ip-masq=false \
    --ip6tables=false \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
    -H "unix://$dir/docker.sock" >"$dir/dockerd.log" 2>&1 </dev/null &
  wait_engine builder
}

start_engine() {
  local node=$1 dir="$STATE/engines/$1" ns addr tls=()
  ns=$(netns "$node"); addr=$(node_address "$node")
  site_address
  setup_netns "$node"
  prepare_engine_dir "$node" || { apply_firewall "$node"; return 0; }
  if [[ $node == "$TLS_NODE" ]]; then
    make_tls
    tls=(--tlsverify --tlscacert "$STATE/tls/ca.pem" --tlscert "$STATE/tls/$node-cert.pem"
         --tlskey "$STATE/tls/$node-key.pem" -H "tcp://$addr:2376")
  fi
  log "$node: starting dockerd in netns $ns ($addr${tls:+, TLS on :2376}, $dir)"
  # nsenter, not `ip netns exec` (it remounts /sys and dockerd loses the devices cgroup)
  PATH="$STATE/hook:$PATH" no_inherited_fds nsenter --net="/var/run/netns/$ns" setsid dockerd \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
    --insecure-registry "$SITE_ADDRESS/32" -H "unix://$dir/docker.sock" "${tls[@]}" \
    --experimental \
    >"$dir/dockerd.log" 2>&1 </dev/null &
  wait_engine "$node"
  apply_firewall "$node"
}

apply_firewall() {  # the node firewall an admin runs on a real node, with the hub allowed
  nsenter --net="/var/run/netns/$(netns "$1")" "$REPO/scripts/node-firewall.sh" \
    --bridge "$USER_BRIDGE" --allow "$SITE_ADDRESS:$DEMO_HUB_API_PORT" \
    --allow "$SITE_ADDRESS:$TEST_HUB_API_PORTS" >/dev/null
}

# ---------------------------------------------------------------- images
build_base() {
  dk builder image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  local rootfs="$STATE/rootfs-bookworm"
  if [[ ! -f $rootfs/.complete ]]; then
    log "debootstrap bookworm (minbase + python3) into $rootfs"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$rootfs" "$DEBIAN_MIRROR" >"$STATE/debootstrap.log" 2>&1 \
      || { tail -20 "$STATE/debootstrap.log" >&2; exit 1; }
    touch "$rootfs/.complete"
  fi
  log "builder: importing $BASE_IMAGE"
  tar -C "$rootfs" --exclude=./.complete -c . | dk builder import - "$BASE_IMAGE" >/dev/null
}

# An image is rebuilt when what it is made of changed: its Dockerfile, images/common (the
# install and start scripts every image shares) and the given build arguments. The hash
# is the image's jupyterhub-gpu.build label.
build_hash() {  # build_hash DOCKERFILE [BUILD-ARG...]
  { cat "$1" "$REPO"/images/common/*; shift; printf '%s\n' "$@"; } | sha256sum | cut -c1-16
}

built_as() {  # built_as IMAGE HASH: the builder has IMAGE with that build label
  [[ $(dk builder image inspect -f '{{index .Config.Labels "jupyterhub-gpu.build"}}' \
       "$1" 2>/dev/null) == "$2" ]]
}

build_test_image() {  # context: the Dockerfile, images/common, the host's CA bundle
  local ctx hash
  hash=$(build_hash "$REPO/images/singleuser-test/Dockerfile")
  built_as "$TEST_IMAGE" "$hash" && return
  log "builder: building $TEST_IMAGE"
  ctx=$(mktemp -d)
  cp "$REPO/images/singleuser-test/Dockerfile" "$ctx/"
  cp -r "$REPO/images/common" "$ctx/common"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/pip-ca.crt"
  dk builder build -q --network host --label "jupyterhub-gpu.build=$hash" \
    -t "$TEST_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# --minimal skips the framework and the apt packages, but not libnss-wrapper, which
# names the user's uid in terminals (images/common/start-singleuser.sh)
CPU_BUILD_ARGS=("APT_PACKAGES=libnss-wrapper openssh-sftp-server")

build_catalog_image() {  # the catalog's CPU image, built the way a site builds its images
  local py=python3 hash a args=()
  hash=$(build_hash "$REPO/images/cpu/Dockerfile" "${CPU_BUILD_ARGS[@]}" \
    "lab=$(cat "$REPO"/images/lab/jupyterhub-gpu-lab/package.json \
      "$REPO"/images/lab/jupyterhub-gpu-lab/static/* | sha256sum)")
  built_as "$CPU_IMAGE" "$hash" && return
  [[ -x $REPO/.venv/bin/python ]] && py=$REPO/.venv/bin/python
  for a in "${CPU_BUILD_ARGS[@]}"; do args+=(--build-arg "$a"); done
  log "builder: building $CPU_IMAGE with images/build.py (--minimal, on the local base)"
  DOCKER_HOST="unix://$(sock builder)" "$py" "$REPO/images/build.py" --only python-cpu \
    --base "$BASE_IMAGE" --minimal "${args[@]}" --label "jupyterhub-gpu.build=$hash" \
    --pip-cert /etc/ssl/certs/ca-certificates.crt \
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
  for i in $(seq 0 $((n - 1))); do start_engine "${NODES[$i]}"; done
  start_builder
  build_base
  build_test_image
  build_catalog_image
  for i in $(seq 0 $((n - 1))); do copy_image "$TEST_IMAGE" builder "${NODES[$i]}"; done
  copy_image "$CPU_IMAGE" builder node-a
  copy_image "$BASE_IMAGE" builder node-a  # an image without Jupyter (engine-error tests)
  log "up: ${NODES[*]:0:$n} (site address $SITE_ADDRESS)"
}

stop_engine() {
  local node=$1 pid
  if engine_alive "$node"; then
    pid=$(pid_of "$node")
    log "$node: stopping"
    kill "$pid"
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  fi
}

cmd_down() {
  for node in "${NODES[@]}" builder; do stop_engine "$node"; done
}

cmd_status() {
  for node in "${NODES[@]}"; do
    if engine_alive "$node"; then
      echo "$node: running in netns $(netns "$node") at $(node_address "$node"), unix://$(sock "$node")"
    else
      echo "$node: stopped"
    fi
  done
}

# one set-up at a time on this machine (parallel test sessions share the engines)
mkdir -p "$STATE"
exec 9>"$STATE/.cluster.lock"
flock 9

case "${1:-up}" in
  up) shift || true; cmd_up "$@" ;;
  down) cmd_down ;;
  stop-node) node_index "$2" >/dev/null; stop_engine "$2" ;;
  start-node) node_index "$2" >/dev/null; start_engine "$2" ;;
  status) cmd_status ;;
  *) echo "usage: $0 up [N] | down | status | stop-node NODE | start-node NODE" >&2; exit 2 ;;
esac
