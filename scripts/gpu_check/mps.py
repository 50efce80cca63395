"""gpu-check's MPS checks, against the daemon gpu-check.sh starts as docs/sharing.md's unit
does (the product's pipe directory, ``/run/jupyterhub-gpu/mps``, and its shm tmpfs).

    mps.py plan --config FILE       # shell assignments: the daemon's defaults, from the
                                    # product's policy code (GPU 0's model in 4 mps shares);
                                    # FILE: a c.GPUSharing for check-node --local -f
    mps.py clients --image IMAGE    # lines mps-limit, mps-no-raise, mps-no-quit
    mps.py whole --image IMAGE      # line mps-whole-gpu

``clients``: one container made as the spawner makes a 1/4 share of GPU 0 in mode ``mps``
(:func:`~jupyterhub_gpu.core.containers.server_env` / ``share_env`` and
:func:`~jupyterhub_gpu.core.sharing.mps.mps_binds`, through ``make_container``) runs
``cuda_program.py mps-client``: half its share then a whole share more (must fail), the
same with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` raised in its own process (must fail), and
``set_default_device_pinned_mem_limit`` / ``quit`` to the control daemon as its user (the
host then finds the default unchanged and the daemon alive).
``whole``: a whole-GPU container (another uid) on the same node while the daemon runs:
its ``CUDA_MPS_PIPE_DIRECTORY`` is the product's non-existent path, it creates a context
directly, NVML lists it as a plain compute process (not an MPS client), ``nvidia-smi``
shows it as type ``C`` (not ``M+C``), and no MPS server runs as its uid.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Any

from common import (
    PROGRAM,
    client,
    emit,
    first_json,
    host_pids,
    inventory,
    logs,
    remove,
    start_server,
    tail,
)

from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.sharing.mps import (
    DEFAULT_PIPE_DIRECTORY,
    NO_MPS_PIPE_DIRECTORY,
    PID_FILE,
    MpsDevice,
    MpsPaths,
    mps_expectations,
    parse_memory_mib,
)
from jupyterhub_gpu.core.sharing.policy import Share, parse_policy, share_of
from jupyterhub_gpu.edges.mps import ask_daemon

SHARES = 4
WHOLE_UID = (64124, 64124)  # another user than the share's (UID_GID)


def plan(inv: NodeInventory) -> tuple[list[MpsDevice], Share, dict[str, Any]]:
    """The policy (GPU 0's model in ``SHARES`` mps shares), the daemon defaults the
    product wants for it, and the share a server gets."""
    gpu = inv.gpus[0]
    models = {gpu.model: {"shares": SHARES, "mode": "mps"}}
    policy = parse_policy(models, {})
    devices = mps_expectations(inv.name, inv, policy)
    rule = policy.rule(inv.name, gpu.model)
    assert rule is not None
    return devices, share_of(rule, 1, gpu.memory_mib), models


def cmd_plan(args: argparse.Namespace) -> int:
    inv = inventory()
    devices, share, models = plan(inv)
    if not devices:
        print(f"echo {shlex.quote('no GPU fits an mps rule')} >&2; exit 1")
        return 1
    with open(args.config, "w") as f:
        f.write(f"c.GPUSharing.models = {models!r}\n")
    print(f"MPS_NODE={shlex.quote(inv.name)}")
    print(f"MPS_THREADS={devices[0].thread_percentage}")
    print("MPS_LIMITS=" + shlex.quote(" ".join(f"{d.index}:{d.memory_mib}" for d in devices)))
    print(f"MPS_SHARE={shlex.quote(share.label)}")
    return 0


def _default_mib(index: int) -> int | None:
    try:
        answer = ask_daemon(DEFAULT_PIPE_DIRECTORY, f"get_default_device_pinned_mem_limit {index}")
    except (OSError, RuntimeError):
        return None
    return parse_memory_mib(answer)


def _daemon_alive() -> tuple[bool, str]:
    try:
        with open(os.path.join(DEFAULT_PIPE_DIRECTORY, PID_FILE)) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError) as e:
        return False, f"no daemon pid ({e})"
    if not os.path.exists(f"/proc/{pid}"):
        return False, f"daemon pid {pid} is gone"
    try:
        answer = ask_daemon(DEFAULT_PIPE_DIRECTORY, "get_default_active_thread_percentage")
    except (OSError, RuntimeError) as e:
        return False, f"daemon pid {pid} does not answer: {e}"
    return True, f"daemon pid {pid} alive, answers {answer.strip()!r}"


def _server_uids() -> list[int]:
    """The uids of the MPS servers the daemon lists."""
    try:
        answer = ask_daemon(DEFAULT_PIPE_DIRECTORY, "get_server_list")
    except (OSError, RuntimeError):
        return []
    uids = []
    for pid in re.findall(r"\d+", answer):
        try:
            with open(f"/proc/{pid}/status") as f:
                found = re.search(r"^Uid:\s+(\d+)", f.read(), re.M)
        except OSError:
            continue
        if found:
            uids.append(int(found.group(1)))
    return uids


def _alloc_text(r: dict[str, Any]) -> str:
    if "error" in r:
        return str(r["error"])
    if r.get("start", {}).get("rc") != 0:
        return f"no CUDA context: {r.get('start')}"
    return ", ".join(
        f"{a['mib']} MiB " + ("ok" if a["rc"] == 0 else f"refused ({a.get('error', a['rc'])})")
        for a in r.get("allocs", [])
    )


def _limit_held(r: dict[str, Any]) -> bool | None:
    """True: half the share allocated, then a whole share more refused; False: the second
    went through; None: it never got that far."""
    allocs = r.get("allocs") or []
    if len(allocs) != 2 or allocs[0]["rc"] != 0:
        return None
    return bool(allocs[1]["rc"] != 0)


def cmd_clients(args: argparse.Namespace) -> int:
    names = ("mps-limit", "mps-no-raise", "mps-no-quit")
    api = client()
    inv = inventory()
    devices, share, _ = plan(inv)
    gpu = inv.gpus[0]
    default = devices[0].memory_mib
    raise_to = min(4 * default, gpu.memory_mib)
    binds = {}
    host_bin = shutil.which("nvidia-cuda-mps-control")
    if host_bin:  # used only if the toolkit did not mount it into the container
        binds[os.path.realpath(host_bin)] = {
            "bind": "/gpucheck-bin/nvidia-cuda-mps-control",
            "mode": "ro",
        }
    command = [
        "python3",
        PROGRAM,
        "mps-client",
        "--share-mib",
        str(share.memory_mib),
        "--raise-to-mib",
        str(raise_to),
    ]
    made: list[str] = []
    try:
        cid = start_server(
            api,
            "mps-share",
            args.image,
            command,
            [gpu.uuid],
            share=share,
            mps=MpsPaths(),
            extra_binds=binds,
        )
        made.append(cid)
        try:
            api.wait(cid, timeout=150)
        except Exception as e:  # a read timeout (requests/urllib3)
            for n in names:
                emit("FAIL", n, f"the share's container did not finish in 150 s ({e})")
            return 1
        text = logs(api, cid)
        lines = [ln for ln in text.splitlines() if ln.startswith("{")]
        if not lines:
            for n in names:
                emit("FAIL", n, f"the share's container said nothing usable: {tail(text)}")
            return 1
        out = json.loads(lines[-1])
    finally:
        remove(api, made)
    servers = _server_uids()
    size = (
        f"{share.label} share of {gpu.model}, {share.memory_mib} MiB, daemon default {default} MiB"
    )
    held = _limit_held(out["limit"])
    detail = f"{size}: {_alloc_text(out['limit'])}; MPS server uids {servers}"
    emit({True: "PASS", False: "FAIL", None: "FAIL"}[held], names[0], detail)

    raised = _limit_held(out["raised"])
    answers = out["control"].get("answers", {})
    set_cmd = f"set_default_device_pinned_mem_limit 0 {raise_to}M"
    after = _default_mib(devices[0].index)
    missing = {"out": "not asked: no nvidia-cuda-mps-control in the container"}
    said = answers.get(set_cmd, missing)
    ok = raised is True and after == default
    detail = (
        f"limit raised to 0={raise_to}M in its own process: {_alloc_text(out['raised'])}; "
        f"its {set_cmd!r} got {said.get('out')!r}; daemon default after: {after} MiB"
    )
    emit("PASS" if ok else "FAIL", names[1], detail)

    alive, how = _daemon_alive()
    quit_said = answers.get("quit", missing)
    writable = out["control"].get("pipe_directory_writable")
    note = "; NOTE: the user can write to the pipe directory" if writable else ""
    detail = f"its 'quit' got {quit_said.get('out')!r}; {how}{note}"
    emit("PASS" if alive and "quit" in answers else "FAIL", names[2], detail)
    return 0


def _smi_types() -> dict[int, str]:
    """pid -> the Type column of ``nvidia-smi``'s process table (``C``, ``M+C``, ...)."""
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in out.splitlines():
        m = re.match(r"^\|\s+\d+\s+\S+\s+\S+\s+(\d+)\s+([A-Z+]+)\s", line)
        if m:
            found[int(m.group(1))] = m.group(2)
    return found


def _nvml_lists(uuid: str) -> tuple[set[int], set[int] | None]:
    """Host pids NVML lists on the GPU as compute processes, and as MPS clients (None:
    the driver can't tell)."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    compute = {int(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    try:
        mps = {int(p.pid) for p in pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)}
    except (pynvml.NVMLError, AttributeError):
        return compute, None
    return compute, mps


def cmd_whole(args: argparse.Namespace) -> int:
    name = "mps-whole-gpu"
    api = client()
    gpu = inventory().gpus[0]
    command = ["python3", PROGRAM, "hold", "--mib", "256", "--seconds", "60"]
    made: list[str] = []
    try:
        cid = start_server(api, "whole", args.image, command, [gpu.uuid], uid_gid=WHOLE_UID)
        made.append(cid)
        said = first_json(api, cid, 45)
        if not said or not said.get("ready"):
            emit(
                "FAIL",
                name,
                f"no CUDA context in 45 s beside the MPS daemon (did it wait for "
                f"the daemon?): {said or ''} {tail(logs(api, cid))}",
            )
            return 1
        pids = host_pids(api, cid)
        compute, mps = _nvml_lists(gpu.uuid)
        types = _smi_types()
        servers = _server_uids()
    finally:
        remove(api, made)
    problems = []
    if said.get("mps_pipe_directory") != NO_MPS_PIPE_DIRECTORY:
        problems.append(f"CUDA_MPS_PIPE_DIRECTORY is {said.get('mps_pipe_directory')!r}")
    if said.get("mps_pipe_directory_exists"):
        problems.append(f"{NO_MPS_PIPE_DIRECTORY} exists in the container")
    if said.get("nvidia_pipes_exist"):
        problems.append("/tmp/nvidia-mps exists in the container (the toolkit mounted it)")
    if not pids & compute:
        problems.append(f"NVML lists none of its pids {sorted(pids)} ({sorted(compute)})")
    if mps is not None and pids & mps:
        problems.append(f"NVML lists pid {sorted(pids & mps)} as an MPS client")
    shown = {p: types[p] for p in pids if p in types}
    if any(t != "C" for t in shown.values()):
        problems.append(f"nvidia-smi types {shown}")
    if WHOLE_UID[0] in servers:
        problems.append(f"an MPS server runs as its uid {WHOLE_UID[0]}")
    detail = (
        f"pid {sorted(pids)}: nvidia-smi type {shown or 'not shown'}, NVML MPS clients "
        f"{'unknown' if mps is None else sorted(mps)}, MPS server uids {servers}, "
        f"CUDA_MPS_PIPE_DIRECTORY={said.get('mps_pipe_directory')}"
    )
    if problems:
        emit("FAIL", name, "; ".join(problems) + f" ({detail})")
        return 1
    emit("PASS", name, "a plain CUDA context: " + detail)
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("plan").add_argument("--config", required=True)
    for what in ("clients", "whole"):
        sub.add_parser(what).add_argument("--image", required=True)
    args = p.parse_args()
    return {"plan": cmd_plan, "clients": cmd_clients, "whole": cmd_whole}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
