#!/usr/bin/env bash
# Every test and check that needs a real NVIDIA GPU (issue 30, "On a real GPU"), on one
# machine with the GPU, its driver, Docker and the NVIDIA Container Toolkit, as root, in
# under 8 minutes. One line per check: "PASS name: detail", "FAIL name: detail" or
# "SKIP name: why". docs/nodes.md ("Checks on a real GPU") says what each check proves.
#
#   scripts/gpu-check.sh [--image IMAGE] [--only NAME,NAME] [--dry-run]
#   scripts/gpu-check.sh --list
#
# Exit status: 0 no check failed (and at least one ran, or --dry-run / --list);
# 1 a check failed; 2 bad usage; 3 nothing could run (no GPU, or every check skipped).
#
# Nothing is pulled (a GPU node may have no network). The containers need an image with
# python3 that is already on the engine: --image, else $GPU_CHECK_IMAGE_TAR (default
# .gpu-check/image.tar in the repository) is `docker load`ed when present, else the
# first of the project's images (jupyterhub-gpu/base:bookworm, ...) or python/debian
# images present that has python3. To bring one: `docker save IMAGE -o image.tar` where
# it exists, copy it to .gpu-check/image.tar. Python: $GPU_CHECK_PYTHON, else
# .venv/bin/python, else python3 (with this repository's dependencies installed).
#
# Clean-up (also on Ctrl-C, kill, timeout): every container and image labelled
# jupyterhub-gpu-check.run=<this run>, the MPS control daemon this script started, the
# tmpfs it mounted, and its work folder. It never touches a daemon it did not start.
set -uo pipefail

SELF=${BASH_SOURCE[0]}
[[ $SELF == */* ]] || SELF=./$SELF
REPO=$(cd "${SELF%/*}/.." && pwd) || exit 2
HELPERS=$REPO/scripts/gpu_check
CHECKS=(nvml-tests check-node attribution mps-limit mps-no-raise mps-no-quit mps-check-node
  mps-whole-gpu build-void suspend-gpu)
declare -A ABOUT=(
  [nvml-tests]="pytest -m gpu: the NVML probe tests (tests/integration/test_nvml_probe.py)"
  [check-node]="jupyterhub-gpu check-node --local: NVML, GPU isolation probes, /tmp/nvidia-mps"
  [attribution]="two containers with one GPU each, a CUDA process in each: the agent's attribution charges each pid to its container"
  [mps-limit]="an MPS share's client allocating past its share's memory is refused (daemon default limit)"
  [mps-no-raise]="the same client raising CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in its own process, or the daemon's default, is still refused"
  [mps-no-quit]="the share's user sending 'quit' to the control daemon: the daemon lives on"
  [mps-check-node]="check-node --local -f CONFIG --only mps against the daemon started as docs/sharing.md's unit"
  [mps-whole-gpu]="a whole-GPU container on the MPS node makes a plain CUDA context, never an MPS client"
  [build-void]="a saved image's build RUN steps (the builder's query, NVIDIA_VISIBLE_DEVICES=void) see no GPU"
  [suspend-gpu]="a CUDA process's device memory kept through cuda-checkpoint, docker checkpoint, a new container and restore (needs cuda-checkpoint, CRIU 4, --experimental)"
)
TIMEOUT_NVML=120 TIMEOUT_NODE=90 TIMEOUT_ATTR=100 TIMEOUT_MPS=170 TIMEOUT_MPS_NODE=60
TIMEOUT_WHOLE=80 TIMEOUT_BUILD=100 TIMEOUT_SUSPEND=150
BUDGET_S=${GPU_CHECK_BUDGET_S:-460}  # all checks; the script stops starting checks after it
MPS_PIPE=/run/jupyterhub-gpu/mps      # the product's defaults (core/sharing/mps.py)
MPS_SHM=/run/jupyterhub-gpu/mps-shm

usage() {
  sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

IMAGE="" ONLY="" DRY=0
while (($#)); do
  case $1 in
    --list)
      for c in "${CHECKS[@]}"; do printf '%-15s %s\n' "$c" "${ABOUT[$c]}"; done
      exit 0 ;;
    --dry-run) DRY=1 ;;
    --image) IMAGE=${2:-}; shift ;;
    --image=*) IMAGE=${1#*=} ;;
    --only) ONLY=${2:-}; shift ;;
    --only=*) ONLY=${1#*=} ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
if [[ -n $ONLY ]]; then
  for c in ${ONLY//,/ }; do
    [[ -n ${ABOUT[$c]:-} ]] || { echo "gpu-check: unknown check $c (--list)" >&2; exit 2; }
  done
fi

FAILS=0 RAN=0
declare -A SEEN=()
record() {  # record STATUS NAME DETAIL: one line, counted
  local detail=${3//$'\n'/ }
  [[ -n ${SEEN[$2]:-} ]] && return 0
  SEEN[$2]=1
  printf '%s %s: %s\n' "$1" "$2" "$detail"
  case $1 in FAIL) FAILS=$((FAILS + 1)); RAN=$((RAN + 1)) ;; PASS) RAN=$((RAN + 1)) ;; esac
}
wanted() { [[ -z $ONLY || ,$ONLY, == *,$1,* ]]; }

# ------------------------------------------------------------------ what this machine has
RUN=$(date +%s)-$$
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
PY=${GPU_CHECK_PYTHON:-}
[[ -z $PY && -x $REPO/.venv/bin/python ]] && PY=$REPO/.venv/bin/python
[[ -z $PY ]] && PY=$(command -v python3 || true)
export GPU_CHECK_RUN=$RUN PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

NO_GPU="" NO_PY="" NO_DOCKER="" NO_TOOLKIT="" NO_IMAGE="" NO_ROOT="" NO_MPS=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  NO_GPU="no NVIDIA GPU found: nvidia-smi is not on PATH (no NVIDIA driver here)"
elif ! smi=$(timeout 30 nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$smi"; then
  NO_GPU="no NVIDIA GPU found: nvidia-smi -L said: $(head -c 200 <<<"$smi")"
fi
if [[ -z $PY ]] || ! "$PY" -c 'import jupyterhub_gpu, docker' >/dev/null 2>&1; then
  NO_PY="no Python with jupyterhub_gpu and docker-py (set GPU_CHECK_PYTHON, or make .venv: scripts/bootstrap.sh)"
fi
if ! command -v docker >/dev/null 2>&1; then
  NO_DOCKER="no docker command here"
elif ! runtimes=$(timeout 15 docker info --format '{{json .Runtimes}}' 2>&1); then
  NO_DOCKER="no Docker engine answers: $(head -c 200 <<<"$runtimes")"
elif [[ $runtimes != *nvidia* ]] && ! command -v nvidia-container-runtime-hook >/dev/null \
  && ! command -v nvidia-ctk >/dev/null; then
  NO_TOOLKIT="no NVIDIA Container Toolkit (no nvidia runtime, nvidia-container-runtime-hook or nvidia-ctk)"
fi
[[ $(id -u) == 0 ]] || NO_ROOT="needs root (mounts a tmpfs, starts the MPS daemon as docs/sharing.md's unit)"
if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  NO_MPS="nvidia-cuda-mps-control is not on PATH (the driver's compute utilities)"
elif [[ -e $MPS_PIPE/control ]]; then
  NO_MPS="an MPS daemon's pipes are already in $MPS_PIPE (the node's jupyterhub-gpu-mps unit?): stop it first, this check starts its own"
fi

pick_image() {  # the first image present with python3 (ctypes): nothing is pulled
  local tar=${GPU_CHECK_IMAGE_TAR:-$REPO/.gpu-check/image.tar} loaded c
  local -a candidates=()
  if [[ -n $IMAGE ]]; then
    candidates=("$IMAGE")
  else
    if [[ -f $tar ]]; then
      loaded=$(timeout 120 docker load -i "$tar" 2>&1 | sed -n 's/^Loaded image: //p' | head -1)
      [[ -n $loaded ]] && candidates+=("$loaded")
    fi
    candidates+=(jupyterhub-gpu/base:bookworm jupyterhub-gpu/python-cpu:3.11-bookworm
      jupyterhub-gpu/singleuser-test:6.1.1)
    mapfile -t -O "${#candidates[@]}" candidates < <(docker images --format '{{.Repository}}:{{.Tag}}' \
      | grep -E '^(python|debian|ubuntu|nvidia/cuda|library/python):' | head -5)
  fi
  for c in "${candidates[@]}"; do
    docker image inspect "$c" >/dev/null 2>&1 || continue
    if timeout 60 docker run --rm --network none --entrypoint python3 "$c" \
      -c 'import ctypes, json, subprocess' >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
if [[ -z $NO_GPU && -z $NO_DOCKER ]]; then
  if ! IMAGE=$(pick_image); then
    NO_IMAGE="no image with python3 on the engine (nothing is pulled): give --image, or docker load one (docker save IMAGE -o .gpu-check/image.tar where it exists)"
    [[ -n ${IMAGE:-} ]] || IMAGE=""
  fi
fi

# ------------------------------------------------------------------ clean-up, always
MPS_STARTED="" MPS_PID="" SHM_MOUNTED="" MADE_DIRS=()
# shellcheck disable=SC2317  # called by the traps
cleanup() {
  trap - EXIT INT TERM HUP
  if [[ -z $NO_DOCKER ]] && command -v docker >/dev/null 2>&1; then
    timeout 30 docker ps -aq --filter "label=jupyterhub-gpu-check.run=$RUN" \
      | xargs -r timeout 60 docker rm -f >/dev/null 2>&1
    timeout 30 docker images -q --filter "label=jupyterhub-gpu-check.run=$RUN" \
      | xargs -r timeout 60 docker rmi -f >/dev/null 2>&1
  fi
  mps_stop
  rm -rf "$WORK"
}
# shellcheck disable=SC2317  # called by cleanup too
mps_stop() {
  [[ -n $MPS_STARTED ]] || return 0
  MPS_STARTED=""
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  for _ in $(seq 50); do
    [[ -n $MPS_PID && -e /proc/$MPS_PID ]] || break
    sleep 0.2
  done
  [[ -n $MPS_PID && -e /proc/$MPS_PID ]] && kill "$MPS_PID" 2>/dev/null
  [[ -n $SHM_MOUNTED ]] && umount "$MPS_SHM" 2>/dev/null
  local d
  for ((i = ${#MADE_DIRS[@]} - 1; i >= 0; i--)); do
    d=${MADE_DIRS[$i]}
    rm -f "$d"/control* "$d"/log "$d"/*.pid 2>/dev/null
    rmdir "$d" 2>/dev/null
  done
}
trap cleanup EXIT
trap 'echo "gpu-check: interrupted" >&2; exit 130' INT TERM HUP

# ------------------------------------------------------------------ running the checks
left() { echo $((BUDGET_S - SECONDS)); }
box() { local l; l=$(left); ((l < $1)) && echo "$((l > 10 ? l : 10))" || echo "$1"; }  # a time box within the budget
# helper TIMEOUT "NAME..." CMD...: run a helper time-boxed; its PASS/FAIL/SKIP lines are
# the results; any NAME it did not report is a FAIL saying why (timeout, crash).
helper() {
  local limit=$1 names=$2 out rc name line
  shift 2
  limit=$(box "$limit")
  out=$(timeout -k 10 "$limit" "$@" 2>"$WORK/stderr")
  rc=$?
  while IFS= read -r line; do
    [[ $line =~ ^(PASS|FAIL|SKIP)\ ([a-z0-9-]+):\ ?(.*)$ ]] || continue
    record "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
  done <<<"$out"
  for name in $names; do
    if ((rc == 124 || rc == 137)); then
      record FAIL "$name" "no result within its ${limit} s time box"
    else
      record FAIL "$name" "the helper exited $rc without a result: $(tail -c 400 "$WORK/stderr" | tr '\n' ' ')"
    fi
  done
}
skip_reason() {  # why NAME cannot run here ("" when it can)
  local n=$1
  [[ -n $NO_GPU ]] && { echo "$NO_GPU"; return; }
  [[ -n $NO_PY ]] && { echo "$NO_PY"; return; }
  case $n in
    nvml-tests) return ;;
    check-node) [[ -n $NO_DOCKER ]] && echo "$NO_DOCKER (its engine and GPU-isolation checks need one)"; return ;;
  esac
  [[ -n $NO_DOCKER ]] && { echo "$NO_DOCKER"; return; }
  [[ -n $NO_TOOLKIT ]] && { echo "$NO_TOOLKIT"; return; }
  [[ -n $NO_IMAGE ]] && { echo "$NO_IMAGE"; return; }
  case $n in
    mps-*)
      [[ -n $NO_ROOT ]] && { echo "$NO_ROOT"; return; }
      [[ -n $NO_MPS ]] && { echo "$NO_MPS"; return; } ;;
  esac
  if (($(left) < 30)); then echo "the ${BUDGET_S} s budget is spent"; fi
}
can_run() {  # can_run NAME: wanted, possible, not a dry run (else its SKIP line)
  wanted "$1" || return 1
  local why
  why=$(skip_reason "$1")
  if [[ -n $why ]]; then record SKIP "$1" "$why"; return 1; fi
  if ((DRY)); then record SKIP "$1" "dry run: would run ${ABOUT[$1]} (image ${IMAGE:-none})"; return 1; fi
  return 0
}

check_nvml() {
  local out rc summary
  out=$(cd "$REPO" && timeout -k 10 "$(box "$TIMEOUT_NVML")" "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider \
    tests/integration/test_nvml_probe.py 2>&1)
  rc=$?
  summary=$(grep -E '(passed|failed|skipped|error)' <<<"$out" | tail -1)
  if ((rc == 124 || rc == 137)); then
    record FAIL nvml-tests "no result within ${TIMEOUT_NVML} s: $(tail -c 300 <<<"$out")"
  elif ((rc != 0)); then
    record FAIL nvml-tests "pytest exit $rc: $summary; $(grep -E '^(FAILED|ERROR)' <<<"$out" | head -5 | tr '\n' ' ')"
  elif [[ $summary != *passed* ]]; then
    record FAIL nvml-tests "nothing passed on a GPU machine: $summary $(grep '^SKIPPED' <<<"$out" | head -3 | tr '\n' ' ')"
  else
    record PASS nvml-tests "$summary $(grep '^SKIPPED' <<<"$out" | head -3 | tr '\n' ' ')"
  fi
}

node_verdict() {  # node_verdict NAME [--excuse CHECKS --why TEXT] < check-node's JSON
  "$PY" "$HELPERS/verdict.py" "$@"
}

check_node_local() {
  local out rc line
  printf '# gpu-check: no c.GPUSharing, so no GPU is in mode mps\n' >"$WORK/no-sharing.py"
  out=$(timeout -k 10 "$(box "$TIMEOUT_NODE")" "$PY" -m jupyterhub_gpu.cli check-node --local --json \
    -f "$WORK/no-sharing.py" --only gpu,mps --image "$IMAGE" 2>"$WORK/stderr")
  rc=$?
  if [[ -n $out ]]; then
    while IFS= read -r line; do
      [[ $line =~ ^(PASS|FAIL)\ check-node:\ (.*)$ ]] && record "${BASH_REMATCH[1]}" check-node "${BASH_REMATCH[2]}"
    done < <(node_verdict check-node <<<"$out")
  fi
  record FAIL check-node "no answer (exit $rc): $(tail -c 300 "$WORK/stderr" | tr '\n' ' ')"
}

mps_start() {  # as docs/sharing.md's unit, without changing the GPU's compute mode
  local d
  for d in /run/jupyterhub-gpu "$MPS_PIPE" "$MPS_SHM"; do
    if [[ ! -d $d ]]; then mkdir -p "$d" && MADE_DIRS+=("$d"); fi
  done
  mkdir -p "$WORK/mps-log"
  if ! mountpoint -q "$MPS_SHM"; then
    mount -t tmpfs -o size=1g,mode=1777,nosuid,nodev,noexec tmpfs "$MPS_SHM" || return 1
    SHM_MOUNTED=1
  fi
  MPS_STARTED=1
  # shellcheck disable=SC2016  # $0 is the inner shell's
  env CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$WORK/mps-log" \
    CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 20 unshare --mount --propagation slave /bin/sh -c \
    'mount --bind "$0" /dev/shm && exec nvidia-cuda-mps-control -d' "$MPS_SHM" \
    </dev/null >/dev/null 2>>"$WORK/mps-start.log" || { cat "$WORK/mps-start.log" >&2; return 1; }
  for _ in $(seq 50); do
    [[ -s $MPS_PIPE/nvidia-cuda-mps-control.pid ]] && break
    sleep 0.2
  done
  MPS_PID=$(cat "$MPS_PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)
  [[ -n $MPS_PID ]] || return 1
  local ctl=(env CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" timeout 10 nvidia-cuda-mps-control)
  echo "set_default_active_thread_percentage $MPS_THREADS" | "${ctl[@]}" >/dev/null || return 1
  for pair in $MPS_LIMITS; do
    echo "set_default_device_pinned_mem_limit ${pair%%:*} ${pair#*:}M" | "${ctl[@]}" >/dev/null || return 1
  done
}

check_mps() {
  local names="" n plan
  for n in mps-limit mps-no-raise mps-no-quit mps-check-node mps-whole-gpu; do
    can_run "$n" && names+=" $n"
  done
  [[ -n $names ]] || return 0
  if ! plan=$(timeout 60 "$PY" "$HELPERS/mps.py" plan --config "$WORK/mps-config.py" 2>"$WORK/stderr"); then
    for n in $names; do record FAIL "$n" "no MPS plan: $(tail -c 300 "$WORK/stderr" | tr '\n' ' ')"; done
    return
  fi
  eval "$plan"  # MPS_NODE MPS_THREADS MPS_LIMITS MPS_SHARE, from the product's policy code
  if ! mps_start 2>"$WORK/stderr"; then
    for n in $names; do
      record FAIL "$n" "the MPS daemon did not start as docs/sharing.md's unit: $(tail -c 300 "$WORK/stderr" | tr '\n' ' ') $(tail -c 300 "$WORK/mps-log/control.log" 2>/dev/null | tr '\n' ' ')"
    done
    mps_stop
    return
  fi
  local clients="" c
  for c in mps-limit mps-no-raise mps-no-quit; do [[ $names == *" $c"* ]] && clients+=" $c"; done
  [[ -n $clients ]] && helper "$TIMEOUT_MPS" "$clients" "$PY" "$HELPERS/mps.py" clients --image "$IMAGE"
  if [[ $names == *" mps-check-node"* ]]; then
    local out line
    out=$(timeout -k 10 "$(box "$TIMEOUT_MPS_NODE")" "$PY" -m jupyterhub_gpu.cli check-node --local --json \
      -f "$WORK/mps-config.py" --node "$MPS_NODE" --only mps 2>"$WORK/stderr")
    # the unit sets EXCLUSIVE_PROCESS; this script leaves the GPU's compute mode alone
    while IFS= read -r line; do
      [[ $line =~ ^(PASS|FAIL)\ mps-check-node:\ (.*)$ ]] && record "${BASH_REMATCH[1]}" mps-check-node "${BASH_REMATCH[2]}"
    done < <(node_verdict mps-check-node --why "gpu-check leaves the GPU's compute mode as it is" \
      --excuse "$(for p in $MPS_LIMITS; do printf 'mps.gpu%s.mode,' "${p%%:*}"; done)" <<<"$out")
    record FAIL mps-check-node "no answer: $(tail -c 300 "$WORK/stderr" | tr '\n' ' ')"
  fi
  [[ $names == *" mps-whole-gpu"* ]] && helper "$TIMEOUT_WHOLE" mps-whole-gpu "$PY" "$HELPERS/mps.py" whole --image "$IMAGE"
  mps_stop
}

if wanted nvml-tests && can_run nvml-tests; then check_nvml; fi
if wanted check-node && can_run check-node; then
  if [[ -z $IMAGE ]]; then
    record SKIP check-node "$NO_IMAGE"
  else
    check_node_local
  fi
fi
if wanted attribution && can_run attribution; then
  helper "$TIMEOUT_ATTR" attribution "$PY" "$HELPERS/attribution.py" --image "$IMAGE"
fi
check_mps
if wanted build-void && can_run build-void; then
  helper "$TIMEOUT_BUILD" build-void "$PY" "$HELPERS/build.py" --image "$IMAGE"
fi
if wanted suspend-gpu && can_run suspend-gpu; then
  helper "$TIMEOUT_SUSPEND" suspend-gpu "$PY" "$HELPERS/suspend.py" --image "$IMAGE"
fi

echo "gpu-check: $RAN checks ran, $FAILS failed, in $SECONDS s${IMAGE:+ (image $IMAGE)}" >&2
((DRY)) && exit 0
((FAILS)) && exit 1
((RAN)) || exit 3
exit 0
