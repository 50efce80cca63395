"""One save from start to end, blocking (the hub runs it off its event loop).

limits -> probe the base -> read the home -> plan -> fetch wheels (hub side) -> Dockerfile
-> context -> build on the node, check the size, push -> :class:`~.model.SavedImage`.
Every failure is a :class:`~.model.SaveError` with a sentence for the user, and leaves
nothing on the node or in the registry (a push that did not finish writes no tag).
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.saving.data import (
    BuilderPolicy,
    InvalidPackage,
    Plan,
    Progress,
    SavedImage,
    SaveError,
    Target,
)
from jupyterhub_gpu.core.saving.limits import (
    Limits,
    allowance,
    check_added_size,
    check_new_save,
)
from jupyterhub_gpu.core.saving.plan import plan_save
from jupyterhub_gpu.core.saving.recipe import dockerfile, image_labels, repository, tag_for
from jupyterhub_gpu.core.saving.validate import image_name
from jupyterhub_gpu.edges.builder.build import BuildSettings, build_and_push
from jupyterhub_gpu.edges.builder.context import build_context
from jupyterhub_gpu.edges.builder.home_records import read_home
from jupyterhub_gpu.edges.builder.probe import base_gpus, base_user, probe_target
from jupyterhub_gpu.edges.builder.wheelhouse import IndexSettings, fetch_wheels


@dataclass(frozen=True)
class SaveRequest:
    """What a user asked for: a name for the image, the catalog entry their server runs
    (slug and image reference), their home as the hub sees it, and choices."""

    owner: str
    name: str
    base_slug: str
    base_image: str
    home: Path
    conda_envs: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()


@dataclass(frozen=True)
class SaveSettings:
    """The admin's settings for saving (see docs/my-images.md)."""

    registry: str
    namespace: str = "jupyterhub-gpu/saved"
    python_path: str = "/opt/venv/bin/python"
    policy: BuilderPolicy = field(default_factory=BuilderPolicy)
    index: IndexSettings = field(default_factory=IndexSettings)
    build: BuildSettings = field(default_factory=BuildSettings)
    limits: Limits = field(default_factory=Limits)


def plan_for(client: Any, request: SaveRequest, settings: SaveSettings) -> tuple[Target, Plan]:
    """The base image's Python (asked of the image on ``client``'s engine) and what the
    user's home adds to it; :class:`InvalidPackage` when that is nothing."""
    target = probe_target(client, request.base_image, settings.python_path)
    try:
        found = read_home(request.home, target.python, request.conda_envs)
    except OSError:
        raise SaveError(
            "Your home folder could not be read from the hub; tell your admin."
        ) from None
    plan = plan_save(found, settings.policy, target, request.apt)
    if plan.empty:
        raise InvalidPackage(
            "Your environment adds no package to its base image that can be saved; "
            "install packages with 'pip install --user', then save again."
        )
    return target, plan


def save_environment(
    client: Any,
    request: SaveRequest,
    settings: SaveSettings,
    existing: Sequence[SavedImage],
    report: Callable[[Progress], None],
    now: datetime | None = None,
) -> SavedImage:
    """Save ``request.owner``'s environment as an image built by ``client`` (the engine
    of the node that runs the server, which has the base image); ``existing`` are the
    saved images the limits count."""
    name = image_name(request.name)
    check_new_save(existing, request.owner, name, settings.limits)
    created = now or datetime.now(timezone.utc)
    build_id = secrets.token_hex(8)
    reference = (
        repository(settings.registry, settings.namespace, request.owner, name)
        + ":"
        + tag_for(created, build_id)
    )
    report(Progress("fetch", "Reading what you installed", None))
    target, plan = plan_for(client, request, settings)
    user = base_user(client, request.base_image)
    gpus = base_gpus(client, request.base_image)
    text = dockerfile(request.base_image, plan, target, build_id, user, gpus)
    labels = image_labels(request.owner, name, request.base_slug, request.base_image, plan, created)
    count = f"{len(plan.pip)} package{'' if len(plan.pip) == 1 else 's'}"
    report(Progress("fetch", f"Fetching {count} from the site's index", None))
    with tempfile.TemporaryDirectory(prefix="jupyterhub-gpu-wheels-") as folder:
        allowed = allowance(existing, request.owner, settings.limits)
        wheels = fetch_wheels(plan.pip, Path(folder), target, settings.index, allowed)
        with build_context(text, wheels, allowed.bytes) as context:
            digest, added = build_and_push(
                client,
                context,
                reference,
                request.base_image,
                labels,
                plan.pip,
                build_id,
                report,
                settings.build,
                lambda added: check_added_size(existing, request.owner, added, settings.limits),
            )
    return SavedImage(
        owner=request.owner,
        name=name,
        base_slug=request.base_slug,
        base_image=request.base_image,
        reference=reference,
        packages=plan.packages,
        size_bytes=added,
        created=created,
        digest=digest,
        skipped=plan.skipped,
    )
