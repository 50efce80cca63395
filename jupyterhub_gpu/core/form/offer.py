"""What the spawn form offers now (issue 36): what fits the GPUs free this minute, how
many more GPUs this user may take, and the image's facts in the order a student reads
them. Pure: the form renders these; its script only looks them up.

- :func:`gpu_allowance`: "Up to 2 per server; you hold 2 of your 3 GPUs, so 1 more now."
  (the count select offers no more than that, never silently more);
- :func:`fit_offers`: for each model choice and GPU count that does not fit what is free
  now, the sentence under the form ("Only 1 RTX 3090 is free now: with 2, your server
  waits in line until 2 are free.") and the count that starts at once (the button
  "Start with 1 GPU now");
- :func:`wait_outlooks`: for each of those, where the server would stand in line and the
  queue's estimate (:func:`~jupyterhub_gpu.core.scheduling.outlook.outlook`, the waiting
  page's own);
- :func:`student_facts`: framework and CUDA first, then where it runs, then the admin's
  details (driver, compute capability).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jupyterhub_gpu.core.form.availability import ModelAvailability
from jupyterhub_gpu.core.form.user_quota import Holdings, UserQuota
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.scheduling.outlook import Outlook, WaitView, outlook
from jupyterhub_gpu.core.scheduling.state import QueuedRequest
from jupyterhub_gpu.core.words import gpus

FRAMEWORKS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "chainer": "Chainer",
              "jax": "JAX", "python": "Python"}  # fmt: skip


@dataclass(frozen=True)
class Allowance:
    """The most GPUs this server may ask for now, and the sentence under the count."""

    most: int
    text: str


def gpu_allowance(max_gpus: int, quota: UserQuota, held: Holdings) -> Allowance:
    """``max_gpus`` per server, less what the user already holds under ``quota``."""
    if max_gpus <= 0:
        return Allowance(0, "Your groups have no GPU allowance.")
    per_server = f"Up to {max_gpus} per server"
    if quota.limit is None:
        return Allowance(max_gpus, f"{per_server}.")
    left = max(quota.limit - held.gpus, 0)
    if held.gpus == 0:
        most = min(max_gpus, quota.limit)
        return Allowance(most, f"{per_server}; at most {quota.limit} at once in all yours.")
    if left == 0:
        return Allowance(
            0,
            f"You hold all {gpus(quota.limit)} you may have at once: stop one of your "
            "servers to use GPUs here, or start this one without.",
        )
    return Allowance(
        min(max_gpus, left),
        f"{per_server}; you hold {held.gpus} of your {quota.limit}, so {left} more now.",
    )


@dataclass(frozen=True)
class Offer:
    """What the form says when ``count`` GPUs of a choice are more than are free now."""

    text: str
    start_now: int  # the count that starts at once (0: none is free)

    @property
    def button(self) -> str:
        """The offer's button ("Start with 1 GPU now"); '' when none is free."""
        return f"Start with {gpus(self.start_now)} now" if self.start_now else ""


def _offer(label: str, free: int, count: int) -> Offer:
    if free <= 0:
        return Offer(
            f"No {label} is free now: Start puts your server in line for one, and the "
            "waiting page shows your place and an estimate.",
            0,
        )
    are = "is" if free == 1 else "are"
    return Offer(
        f"Only {free} {label} {are} free now: with {count}, your server waits in line "
        f"until {count} are free.",
        free,
    )


def fit_offers(
    models: Sequence[ModelAvailability], most: int, any_model: str
) -> dict[str, dict[int, Offer]]:
    """choice (``any_model`` or a model's name) -> GPU count -> :class:`Offer`, for every
    count up to ``most`` that is more than that choice has free now (placement may still
    not fit what looks free on several nodes: the waiting page then says so)."""
    out: dict[str, dict[int, Offer]] = {}
    total_free = sum(m.free for m in models)
    choices = [(any_model, "GPU" if total_free <= 1 else "GPUs", total_free)]
    choices += [(m.model, m.label, m.free) for m in models]
    for key, label, free in choices:
        offers = {n: _offer(label, free, n) for n in range(1, most + 1) if n > free}
        if offers:
            out[key] = offers
    return out


def wait_outlooks(
    view: WaitView,
    offers: dict[str, dict[int, Offer]],
    any_model: str,
    user: str,
    group: str,
) -> dict[str, dict[int, Outlook]]:
    """choice -> GPU count -> :class:`~.scheduling.outlook.Outlook`, for each offer (a
    choice and count that would wait): ``user``'s server, charged to ``group``, as if it
    joined the queue of ``view`` now. The image's own limits (driver, architecture) are
    left out: an estimate."""
    out: dict[str, dict[int, Outlook]] = {}
    for key, by_count in offers.items():
        models = None if key == any_model else frozenset({key})
        for n in by_count:
            request = PlacementRequest(n, allowed_models=models)
            item = QueuedRequest(f"form:{user}", user, group, request, view.state.now)
            out.setdefault(key, {})[n] = outlook(view, item)
    return out


def framework_label(framework: str, version: str) -> str:
    """``PyTorch 2.3.1``; an unknown framework as the catalog spells it."""
    name = FRAMEWORKS.get(framework.lower(), framework)
    return f"{name} {version}".strip() if name else ""


def student_facts(
    framework: str,
    version: str,
    cuda: str,
    where: str = "",
    ready: str = "",
    admin: Sequence[str] = (),
) -> str:
    """ "PyTorch 2.3.1 · CUDA 12.1 · runs on gpu-a · ready on 1 of 2 nodes · needs driver
    >= 525.60.13, compute capability 5.0 to 9.0": what a student looks for first."""
    parts = [p for p in (framework_label(framework, version), cuda, where, ready) if p]
    if admin:
        parts.append("needs " + ", ".join(admin))
    return " · ".join(parts)
