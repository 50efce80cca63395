#!/usr/bin/env bash
# The node firewall for jupyterhub-gpu's user bridge. Run it as root on every GPU node,
# after dockerd has started (and again at boot, after docker.service): it is idempotent.
#
#   jupyterhub-gpu firewall [--bridge IFACE] [--allow ADDR[/PREFIX][:PORT[-PORT]]]...
#                           [--dns ADDR]... [--no-host-dns] [--dry-run | --remove]
# User servers run on a Docker bridge network (GPUCluster.user_network, bridge
# interface GPUCluster.user_bridge, default jhgpu-users) with inter-container
# traffic off. Docker itself does not stop a container from reaching the node it runs on
# (the bridge gateway is the node) nor the site's private network. This script does:
#
#   INPUT  (to the node itself, from the user bridge): only replies to connections the
#          node opened are accepted; everything else is dropped: the Docker API (2375/2376),
#          the node agent, sshd, other users' published ports, anything bound to 0.0.0.0.
#   DOCKER-USER (forwarded, from the user bridge): replies pass; the --allow destinations
#          pass (the hub's API address, and what the site wants users to reach: LDAP,
#          storage, a registry); every other private, link-local (cloud metadata
#          169.254.169.254), shared (100.64/10) and loopback destination is dropped.
#          Public addresses stay reachable (pip install from PyPI); block them in the
#          site's own firewall if the site wants no egress at all.
#   DNS    each --dns resolver is reachable on port 53 (UDP and TCP), also when it is the
#          node itself: Docker's embedded DNS forwards the containers' queries from their
#          own network namespace, across the bridge. `jupyterhub-gpu firewall` adds one
#          --dns for each resolver Docker uses (daemon.json's "dns", else the node's
#          resolv.conf; --no-host-dns: none).
#
# The hub must be allowed, or servers cannot reach its API: --allow HUB_IP:PORT (only its
# API port: the hub machine's other services, LDAP say, stay out of reach unless allowed).
# Rules live in two chains of our own, JHGPU-INPUT and JHGPU-FORWARD, that this script
# flushes and refills; the jumps to them go first in INPUT and DOCKER-USER.
# DOCKER-USER is Docker's: the script refuses to run (and changes nothing) unless the
# FORWARD chain jumps to it, as dockerd's iptables rules do. With nftables-only set-ups or
# "iptables": false in daemon.json nothing would pass through rules put there.
# IPv4 only: the user network must have no IPv6. The hub creates it with IPv6 off and
# refuses one with IPv6; `jupyterhub-gpu check-node` fails a node whose network has it.
# Nothing removes the rules when the unit stops: `--remove` is for an admin, by hand.
# It ships inside the package (jupyterhub_gpu/cli/files/); `jupyterhub-gpu firewall` runs
# it, `jupyterhub-gpu units install` runs it at boot; scripts/node-firewall.sh links here.
set -euo pipefail

BRIDGE=jhgpu-users
ALLOW=()
DNS=()
MODE=apply
PRIVATE=(10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 169.254.0.0/16 127.0.0.0/8
         192.0.0.0/24 198.18.0.0/15 224.0.0.0/4 240.0.0.0/4)

usage() { sed -n '2,9p' "$0" >&2; exit 2; }
while (($#)); do
  case $1 in
    --bridge) BRIDGE=${2:?}; shift 2 ;;
    --allow) ALLOW+=("${2:?}"); shift 2 ;;
    --dns) DNS+=("${2:?}"); shift 2 ;;
    --no-host-dns) shift ;;  # read by `jupyterhub-gpu firewall`, which adds the --dns
    --dry-run) MODE=print; shift ;;
    --remove) MODE=remove; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ $BRIDGE =~ ^[A-Za-z0-9_.-]{1,15}$ ]] || { echo "bad bridge name: $BRIDGE" >&2; exit 2; }

ipt() {
  if [[ $MODE == print ]]; then echo "iptables $*"; else iptables -w "$@"; fi
}

chain() {  # chain NAME: exists and is empty
  if [[ $MODE == print ]]; then echo "iptables -N $1 ; iptables -F $1"; return; fi
  iptables -w -N "$1" 2>/dev/null || iptables -w -F "$1"
}

jump() {  # jump FROM TO: the first rule of FROM (an existing chain) sends the bridge's packets to TO
  if [[ $MODE == print ]]; then echo "iptables -I $1 1 -i $BRIDGE -j $2"; return; fi
  iptables -w -C "$1" -i "$BRIDGE" -j "$2" 2>/dev/null || iptables -w -I "$1" 1 -i "$BRIDGE" -j "$2"
}

docker_user_in_use() {  # does FORWARD send packets to DOCKER-USER (dockerd's own rule)?
  if [[ $MODE == print ]]; then echo "iptables -S FORWARD  # must show -j DOCKER-USER"; return; fi
  local rules  # read whole first: `iptables | grep -q` fails under pipefail when grep quits early
  rules=$(iptables -w -S FORWARD 2>/dev/null) || return 1
  grep -Eq -- '^-A FORWARD( .*)? -j DOCKER-USER( |$)' <<<"$rules"
}

if [[ $MODE == remove ]]; then
  iptables -w -D INPUT -i "$BRIDGE" -j JHGPU-INPUT 2>/dev/null || true
  iptables -w -D DOCKER-USER -i "$BRIDGE" -j JHGPU-FORWARD 2>/dev/null || true
  for c in JHGPU-INPUT JHGPU-FORWARD; do
    iptables -w -F "$c" 2>/dev/null || true; iptables -w -X "$c" 2>/dev/null || true
  done
  echo "node firewall for $BRIDGE removed"
  exit 0
fi

# Check every --allow before touching iptables: a bad one must not leave the chains
# flushed (user containers would then reach everything until someone noticed).
RULES=()
port_ok() { [[ $1 =~ ^(0|[1-9][0-9]{0,4})$ ]] && (($1 <= 65535)); }
for a in "${ALLOW[@]}"; do
  addr=${a%%:*} ports=${a#"$addr"} ports=${ports#:} lo=${ports%%-*} hi=${ports#*-}
  if [[ ! $addr =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?$ ]]; then
    bad=1
  elif [[ $a != *:* ]]; then
    RULES+=("-d $addr")
  elif port_ok "$lo" && port_ok "$hi" && ((10#$lo <= 10#$hi)) && [[ $ports =~ ^[0-9]+(-[0-9]+)?$ ]]; then
    RULES+=("-d $addr -p tcp --dport ${lo}$([[ $lo == "$hi" ]] || echo ":$hi")")
  else
    bad=1
  fi
  if [[ ${bad:-} ]]; then
    echo "--allow wants ADDR[/PREFIX][:PORT[-PORT]] with a numeric IPv4 address and ports" \
      "0-65535 (low-high), got: $a; nothing was changed" >&2
    exit 2
  fi
done

DNS_RULES=()
for d in "${DNS[@]}"; do
  if [[ ! $d =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; then
    echo "--dns wants a numeric IPv4 address, got: $d; nothing was changed" >&2
    exit 2
  fi
  DNS_RULES+=("-d $d -p udp --dport 53" "-d $d -p tcp --dport 53")
done

if ! docker_user_in_use; then
  echo "the FORWARD chain does not jump to DOCKER-USER, so rules there would filter nothing" \
    "(is dockerd running with its iptables rules? \"iptables\": false in daemon.json, or an" \
    "nftables-only firewall, leaves the user bridge unfiltered); start dockerd with iptables" \
    "on, or filter $BRIDGE in your own firewall; nothing was changed" >&2
  exit 1
fi

chain JHGPU-INPUT
ipt -A JHGPU-INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
for r in "${DNS_RULES[@]}"; do
  # shellcheck disable=SC2086  # a rule's words, made above from checked parts
  ipt -A JHGPU-INPUT $r -j RETURN
done
ipt -A JHGPU-INPUT -j DROP

chain JHGPU-FORWARD
ipt -A JHGPU-FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
for r in "${RULES[@]}" "${DNS_RULES[@]}"; do
  # shellcheck disable=SC2086  # a rule's words, made above from checked parts
  ipt -A JHGPU-FORWARD $r -j RETURN
done
for net in "${PRIVATE[@]}"; do ipt -A JHGPU-FORWARD -d "$net" -j DROP; done

jump INPUT JHGPU-INPUT
jump DOCKER-USER JHGPU-FORWARD
[[ $MODE == print ]] || echo "node firewall for $BRIDGE applied (allowed: ${ALLOW[*]:-nothing};" \
  "DNS: ${DNS[*]:-none})"
