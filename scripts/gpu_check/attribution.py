"""gpu-check ``attribution``: two containers, each made as the spawner makes a server with
one GPU (the second GPU when there is one, else the same GPU, time-sliced), each running
a process that creates a CUDA context and allocates memory. Then the agent's own reading
(:class:`jupyterhub_gpu.edges.nvml.NVMLProbe`: NVML's processes, each pid's
``/proc/<pid>/cgroup`` through ``core/attribution/processes.py: container_id_from_cgroup``)
and :func:`~jupyterhub_gpu.core.attribution.processes.attribute` must charge each
container's pid, with its memory, to that container's allocation, and nothing of theirs
to anything else.

    python scripts/gpu_check/attribution.py --image IMAGE
"""

from __future__ import annotations

import argparse
import sys
import time

from common import (
    PROGRAM,
    client,
    emit,
    first_json,
    host_pids,
    inventory,
    remove,
    start_server,
    tail,
)

from jupyterhub_gpu.core.attribution.processes import Container, attribute

NAME = "attribution"
MIB = 256


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--image", required=True)
    args = p.parse_args()
    api = client()
    gpus = inventory().gpus
    uuids = [gpus[0].uuid, gpus[1 % len(gpus)].uuid]
    made: list[str] = []
    try:
        command = ["python3", PROGRAM, "hold", "--mib", str(MIB), "--seconds", "120"]
        for n, uuid in zip("ab", uuids, strict=True):
            made.append(start_server(api, f"attr-{n}", args.image, command, [uuid]))
        for cid in made:
            said = first_json(api, cid, 45)
            if not said or not said.get("ready"):
                emit(
                    "FAIL",
                    NAME,
                    f"container {cid[:12]} made no CUDA context: {said or ''} "
                    f"{tail(api.logs(cid).decode(errors='replace'))}",
                )
                return 1
        wanted = {cid: host_pids(api, cid) for cid in made}
        labels = {cid: api.inspect_container(cid)["Config"]["Labels"] for cid in made}
        deadline = time.monotonic() + 20
        while True:
            inv = inventory()
            processes = {g.uuid: list(g.processes or ()) for g in inv.gpus}
            seen = {p.pid for ps in processes.values() for p in ps}
            if all(pids & seen for pids in wanted.values()) or time.monotonic() > deadline:
                break
            time.sleep(1)
        if any(g.processes is None for g in inv.gpus if g.uuid in uuids):
            emit("FAIL", NAME, "the probe gave no per-process data for the GPU(s)")
            return 1
        found = attribute(processes, [Container(cid, labels[cid]) for cid in made])
        problems, shown = [], []
        for cid, uuid in zip(made, uuids, strict=True):
            use = found.use_of(cid, uuid)
            pids = wanted[cid]
            if use is None or not pids & set(use.pids):
                procs = [p for ps in processes.values() for p in ps if p.pid in pids]
                problems.append(
                    f"container {cid[:12]} (host pids {sorted(pids)}) not charged: NVML saw {procs}"
                )
                continue
            if use.memory_mib is not None and use.memory_mib < MIB:
                problems.append(f"container {cid[:12]}: {use.memory_mib} MiB < the {MIB} allocated")
            shown.append(f"pid {sorted(use.pids)} -> {cid[:12]} on {uuid} ({use.memory_mib} MiB)")
        ours = set().union(*wanted.values())
        strays = [u for u in found.unattributed if u.process.pid in ours]
        problems += [f"pid {u.process.pid} unattributed ({u.reason})" for u in strays]
        if problems:
            emit("FAIL", NAME, "; ".join(problems))
            return 1
        same = " (one GPU: both on it, time-sliced)" if uuids[0] == uuids[1] else ""
        emit("PASS", NAME, "; ".join(shown) + same)
        return 0
    finally:
        remove(api, made)


if __name__ == "__main__":
    sys.exit(main())
