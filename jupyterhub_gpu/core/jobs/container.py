"""A job's container: :func:`~jupyterhub_gpu.core.workload.make_container`'s description
of a server, with another command, no published port and no JupyterLab.

The command runs under :data:`WRAPPER`, a POSIX shell script run as the user (never the
hub, never root): it makes ``~/jobs/ID/``, enters the working directory, and writes the
command's output to ``~/jobs/ID/output.log`` up to the site's limit, then one line that
says it was cut (the rest is read and dropped, so the job goes on). The output is copied
line by line (``awk``, mawk's reads unbuffered by ``-W interactive``, flushed at each
line: ``job logs -f`` sees a line as soon as it ends; a progress bar redrawn with
carriage returns shows when its line ends). The script passes SIGTERM on to the command
(Docker sends it to PID 1) and exits with the command's exit code. The container is kept
after it exits (``remove_on_exit`` False) so that a hub down at that moment still reads
the exit code; the hub removes it then. A requeued job's next start appends to the same
file (the limit counts each start's output).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.core.allocation import LABEL
from jupyterhub_gpu.core.containers import ServerContainer
from jupyterhub_gpu.core.sharing.policy import Share
from jupyterhub_gpu.core.workload import Workload

#: the job's id on its container (the seal covers the server label ``job:ID`` instead)
JOB_LABEL = f"{LABEL}.job"
#: the awk program that copies the output up to ``L`` bytes, then says it was cut
_BOUND = (
    "{ n += length($0) + 1; if (n <= L) { print; fflush() } else if (!c) { "
    'r = L - n + length($0) + 1; if (r > 0) printf "%s", substr($0, 1, r); '
    'printf "\\n[jupyterhub-gpu: the output was cut here at %s bytes, the limit of this '
    'hub; the job went on]\\n", L; fflush(); c = 1 } }'
)
WRAPPER = "\n".join(
    [
        'd="$HOME/jobs/$JUPYTERHUB_GPU_JOB_ID"; o="$d/output.log"; p="$d/.output.$$"',
        'mkdir -p "$d" || { echo "jupyterhub-gpu: cannot make $d" >&2; exit 125; }',
        'cd "$JUPYTERHUB_GPU_JOB_WORKDIR" || { echo "The working directory'
        ' $JUPYTERHUB_GPU_JOB_WORKDIR does not exist or cannot be entered." >"$o"; exit 125; }',
        'rm -f "$p"; mkfifo "$p" || { echo "jupyterhub-gpu: no pipe in $d" >"$o"; exit 125; }',
        "a=awk; awk -W interactive 'BEGIN {}' </dev/null >/dev/null 2>&1 &&"
        ' a="awk -W interactive"',
        '[ "${JUPYTERHUB_GPU_JOB_RESTARTS:-0}" = 0 ] && : >"$o"',
        f'LC_ALL=C $a -v L="$JUPYTERHUB_GPU_OUTPUT_LIMIT" \'{_BOUND}\' <"$p" >>"$o" &',
        "w=$!",
        '"$@" >"$p" 2>&1 </dev/null &',
        "c=$!",
        "trap 'kill -TERM $c 2>/dev/null' TERM INT",
        "wait $c; s=$?",
        "while kill -0 $c 2>/dev/null; do wait $c; s=$?; done",
        'wait $w; rm -f "$p"',
        "exit $s",
    ]
)


def job_container_name(job_id: str, allocation: str) -> str:
    """Unique on its node: the job's id (digits and ``_``) and its allocation's start."""
    return f"jhgpu-job-{job_id}-{allocation[:8]}"


@dataclass(frozen=True)
class JobLaunch:
    """What one start of a job needs beyond its container's identity and isolation."""

    job_id: str
    user: str
    command: tuple[str, ...]
    image: str  # the reference to run
    home: str  # the home's path in the container
    workdir: str  # checked to be inside the home
    allocation: str
    array_index: int | None = None
    restarts: int = 0
    grace_s: float = 120.0
    output_limit: int = 100 * 1024 * 1024
    extra_env: Mapping[str, str] = field(default_factory=dict)  # the site's, under ours


def job_env(launch: JobLaunch) -> dict[str, str]:
    """The job's own environment (the GPU variables are laid over it last by
    :func:`~jupyterhub_gpu.core.workload.workload_env`). No token of the hub's: a job
    runs the user's code and gets no credential."""
    env = dict(launch.extra_env)
    env.update(
        HOME=launch.home,
        USER=launch.user,
        JUPYTERHUB_USER=launch.user,
        JUPYTERHUB_GPU_JOB_ID=launch.job_id,
        JUPYTERHUB_GPU_JOB_RESTARTS=str(launch.restarts),
        JUPYTERHUB_GPU_PREEMPT_GRACE=str(int(launch.grace_s)),
        JUPYTERHUB_GPU_JOB_WORKDIR=launch.workdir,
        JUPYTERHUB_GPU_OUTPUT_LIMIT=str(int(launch.output_limit)),
    )
    if launch.array_index is not None:
        env["JUPYTERHUB_GPU_ARRAY_INDEX"] = str(launch.array_index)
    return env


def job_workload(
    launch: JobLaunch,
    container: ServerContainer,
    share: Share | None = None,
    site_create: Mapping[str, Any] | None = None,
    site_host: Mapping[str, Any] | None = None,
) -> Workload:
    """The job as a :class:`Workload` (``container``'s labels carry the job's sealed
    server labels and :data:`JOB_LABEL`)."""
    return Workload(
        name=job_container_name(launch.job_id, launch.allocation),
        image=launch.image,
        command=["/bin/sh", "-c", WRAPPER, "jupyterhub-gpu-job", *launch.command],
        env=job_env(launch),
        container=container,
        share=share,
        port=None,
        remove_on_exit=False,
        site_create=dict(site_create or {}),
        site_host=dict(site_host or {}),
    )
