"""The Dockerfile, labels and registry reference of a saved image. Pure.

The Dockerfile has two stages, both ``FROM`` the catalog image the server ran:

1. ``install``: copies the wheelhouse (fetched outside the build, :mod:`.wheelhouse`) in,
   installs the pinned packages into the image's virtual environment with ``pip install
   --no-index --find-links`` (no network: the build runs with ``network_mode="none"``),
   then copies exactly the files those packages installed (their ``RECORD``, under the
   environment's prefix) to a staging folder;
2. the image: the base again, the base's own copies of replaced packages uninstalled,
   and the staging folder copied over the environment. The wheels never reach the image,
   so it grows by the installed packages only.

Safety (docs/my-images.md): every ``RUN`` is in exec form (a JSON array: no shell ever
parses a package name), package names and versions come from :mod:`.validate`, nothing
the user controls is written into the Dockerfile except those, and the image ends as the
base's non-root user. No ``RUN`` sees a GPU, whatever the node's default runtime: stage 1
sets ``ENV NVIDIA_VISIBLE_DEVICES=void`` (stage 1 never reaches the image); the final
stage takes it as a build argument (:func:`build_args`; an ``ARG`` is in a ``RUN``'s
environment but not in the image's), unless the base sets the variable itself (a CUDA
base sets ``all``, and an image's ``ENV`` wins over a build argument): then ``ENV ...=void``
before its ``RUN`` and the base's own value again after it, so the image's environment
is the base's exactly. ``ARG`` :data:`BUILD_ARG` marks the build's containers (their
environment) for the build's watch (:mod:`jupyterhub_gpu.edges.builder.watch`).
Labels (owner, name, ...) go through the build API's ``labels``, never
through the Dockerfile, where a newline in a value would start a new instruction.
:func:`audit_dockerfile` re-checks every generated file against these rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone

from jupyterhub_gpu.core.catalog.entries import IMAGE_RE
from jupyterhub_gpu.core.homes import safe_path_component
from jupyterhub_gpu.core.saving.data import InvalidPackage, Plan, SavedImage, Target
from jupyterhub_gpu.core.saving.validate import image_name, repository_component

WHEELHOUSE = "/tmp/jupyterhub-gpu-wheelhouse"  #: where stage 1 finds the wheels
STAGING = "/tmp/jupyterhub-gpu-staging"  #: what stage 1 leaves for the image
CONTEXT_WHEELS = "wheelhouse"  #: the wheels' folder in the build context
LABEL = "io.jupyterhub-gpu.saved."  #: prefix of a saved image's labels
BUILD_ID_LABEL = "io.jupyterhub-gpu.build-id"  #: marks stage 1's images (removed after a build)
FORMAT = "1"
REFERENCE_MAX = 255  #: characters in a repository name (registry limit)
DEFAULT_USER = "65534:65534"

_USER = re.compile(
    r"^(?:[0-9]{1,10}|[a-z_][a-z0-9_-]{0,31})(?::(?:[0-9]{1,10}|[a-z_][a-z0-9_-]{0,31}))?$"
)
_PATH = re.compile(r"^(?:/[A-Za-z0-9._+-]+)+$")
_BUILD_ID = re.compile(r"^[0-9a-f]{8,64}$")
_REGISTRY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?$")
_INSTRUCTIONS = frozenset({"FROM", "LABEL", "USER", "COPY", "RUN", "ARG", "ENV"})
GPUS = "NVIDIA_VISIBLE_DEVICES"  #: what the NVIDIA runtime reads: which GPUs a container gets
NO_GPU = "void"  #: no GPU, and no driver files either (the NVIDIA container toolkit)
BUILD_ARG = "JUPYTERHUB_GPU_BUILD"  #: the build id, in every RUN container's environment
_GPUS_VALUE = re.compile(r"^[A-Za-z0-9,:._/-]{0,200}$")

# Stage 1, after pip: copy each named distribution's installed files (from its RECORD),
# under the environment's prefix only, to STAGING, readable by every uid.
COLLECT = (
    "import importlib.metadata as m, os, shutil, sys\n"
    "prefix = os.path.realpath(sys.prefix)\n"
    "for name in sys.argv[2:]:\n"
    "    d = m.distribution(name)\n"
    "    for f in d.files or ():\n"
    "        src = os.path.realpath(d.locate_file(f))\n"
    "        if os.path.commonpath([src, prefix]) != prefix or not os.path.isfile(src):\n"
    "            continue\n"
    "        dst = os.path.join(sys.argv[1], os.path.relpath(src, prefix))\n"
    "        os.makedirs(os.path.dirname(dst), mode=0o755, exist_ok=True)\n"
    "        shutil.copy2(src, dst)\n"
    "        os.chmod(dst, 0o755 if os.stat(src).st_mode & 0o111 else 0o644)\n"
)


def _check_path(path: str, what: str) -> str:
    if not _PATH.fullmatch(path) or {".", ".."} & set(path.split("/")):
        raise InvalidPackage(
            f"The base image's {what} {path!r} is not a plain absolute path; "
            "ask your admin to check the catalog image."
        )
    return path


def final_user(base_user: str) -> str:
    """The user the image ends with: the base's, unless it is empty or root (then
    :data:`DEFAULT_USER`; the spawner sets the server's uid:gid in any case)."""
    user = base_user.strip()
    if not user or user.split(":")[0] in ("0", "root") or not _USER.fullmatch(user):
        return DEFAULT_USER
    return user


def _run(*argv: str) -> str:
    return "RUN " + json.dumps(list(argv))


def build_args(build_id: str) -> dict[str, str]:
    """The build arguments the Dockerfile declares (the build API's ``buildargs``)."""
    return {GPUS: NO_GPU, BUILD_ARG: build_id}


def install_stage(base: str, plan: Plan, target: Target, build_id: str) -> list[str]:
    python = _check_path(target.python_path, "Python")
    names = [r.name for r in plan.pip]
    pip = [python, "-I", "-m", "pip", "install", "--no-index", "--find-links", WHEELHOUSE]
    pip += ["--no-deps", "--only-binary", ":all:", "--no-cache-dir"]
    pip += ["--disable-pip-version-check", "--no-warn-script-location", "--progress-bar", "off"]
    return [
        f"FROM {base} AS install",
        f'LABEL {BUILD_ID_LABEL}="{build_id}"',
        f"ARG {BUILD_ARG}",
        f"ARG {GPUS}",
        f"ENV {GPUS}={NO_GPU}",
        "USER root",
        f"COPY {CONTEXT_WHEELS}/ {WHEELHOUSE}/",
        _run(*pip, "--", *(r.spec for r in plan.pip)),
        _run(python, "-I", "-c", COLLECT, STAGING, *names),
    ]


def _without_gpus(base_gpus: str | None, uninstall: list[str]) -> list[str]:
    """The final stage's ``RUN``, with no GPU, leaving the image's environment as is."""
    if base_gpus is None:
        return [f"ARG {BUILD_ARG}", f"ARG {GPUS}", "USER root", _run(*uninstall)]
    if not _GPUS_VALUE.fullmatch(base_gpus):
        raise InvalidPackage(
            f"The base image sets {GPUS} to a value this hub does not expect; ask your "
            "admin to check the catalog image."
        )
    return [
        f"ARG {BUILD_ARG}",
        f"ENV {GPUS}={NO_GPU}",
        "USER root",
        _run(*uninstall),
        f"ENV {GPUS}={base_gpus}",
    ]


def dockerfile(
    base: str,
    plan: Plan,
    target: Target,
    build_id: str,
    base_user: str,
    base_gpus: str | None = None,
) -> str:
    """The saved image's Dockerfile (see the module's docstring). ``base_gpus``: the
    base image's own ``NVIDIA_VISIBLE_DEVICES`` (``None``: it sets none)."""
    if not IMAGE_RE.fullmatch(base) or not (":" in base.rsplit("/", 1)[-1] or "@" in base):
        raise InvalidPackage(
            f"The base image {base!r} is not a pinned image reference; ask "
            "your admin to check the catalog."
        )
    if not _BUILD_ID.fullmatch(build_id):
        raise ValueError(f"build id must be hex, got {build_id!r}")
    if plan.apt:
        raise InvalidPackage(
            "Debian packages can't be saved into an image yet; save "
            "without them, or ask your admin."
        )
    if not plan.pip:
        raise InvalidPackage(
            "Your environment adds no Python package to its base image "
            "that can be saved; there is nothing to save."
        )
    prefix = _check_path(target.prefix, "environment folder")
    lines = [
        "# A saved environment, generated by jupyterhub-gpu (docs/my-images.md).",
        *install_stage(base, plan, target, build_id),
        "",
        f"FROM {base}",
    ]
    if plan.replaces:
        uninstall = [target.python_path, "-I", "-m", "pip", "uninstall", "--yes"]
        uninstall += ["--disable-pip-version-check", *plan.replaces]
        lines += _without_gpus(base_gpus, uninstall)
    lines += [f"COPY --from=install {STAGING}/ {prefix}/", f"USER {final_user(base_user)}"]
    text = "\n".join(lines) + "\n"
    audit_dockerfile(text)
    return text


def _audit_gpus(word: str, rest: str, line: str, no_gpu: str) -> str:
    """The stage's GPU state after ``line``: ``""`` (the base's), ``"arg"`` or ``"env"``
    (``ENV ...=void``; a later ``ENV`` gives the base's value back: ``"restored"``)."""
    if word == "ARG":
        if rest not in (BUILD_ARG, GPUS):
            raise ValueError(f"ARG not allowed in a saved image: {line[:80]!r}")
        return "arg" if rest == GPUS and not no_gpu else no_gpu
    if word == "ENV":
        name, _, value = rest.partition("=")
        if name != GPUS or not _GPUS_VALUE.fullmatch(value):
            raise ValueError(f"ENV not allowed in a saved image: {line[:80]!r}")
        if no_gpu == "env":
            return "restored"  # the base's own value, after the RUN
        if value != NO_GPU:
            raise ValueError(f"ENV {GPUS} only to give the base's value back: {line[:80]!r}")
        return "env"
    if word == "RUN" and no_gpu not in ("arg", "env"):
        raise ValueError(f"RUN without {GPUS}={NO_GPU} before it: {line[:80]!r}")
    return no_gpu


def audit_dockerfile(text: str) -> None:
    """Raise ``ValueError`` unless every line is a comment, blank, or one of FROM, LABEL
    (stage 1's build id only), USER (never root at the end), COPY, an exec-form RUN with
    no GPU (``ARG`` or ``ENV NVIDIA_VISIBLE_DEVICES=void`` before it in its stage), ARG
    (:func:`build_args`' names) and ENV (``NVIDIA_VISIBLE_DEVICES`` only; the final
    stage gives the base's value back after its ``RUN``)."""
    last_user = ""
    no_gpu = ""
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word not in _INSTRUCTIONS or line.endswith("\\"):
            raise ValueError(f"instruction not allowed in a saved image: {line[:80]!r}")
        if word == "FROM":
            no_gpu = ""
        if word == "RUN" and not isinstance(json.loads(rest), list):
            raise ValueError(f"RUN must be in exec form: {line[:80]!r}")
        no_gpu = _audit_gpus(word, rest, line, no_gpu)
        if word == "LABEL" and not rest.startswith(BUILD_ID_LABEL + "="):
            raise ValueError(f"labels go through the build API: {line[:80]!r}")
        if word == "USER":
            last_user = rest
    if final_user(last_user) != last_user:
        raise ValueError(f"the image must end as a non-root user, not {last_user!r}")
    if no_gpu == "env":
        raise ValueError(f"the image must end with the base's {GPUS}, not {NO_GPU}")


def owner_component(owner: str) -> str:
    """The owner's part of a repository path: ``u-`` and the escaped username
    (``[a-z0-9-]``), the same for every user so that no two names can collide."""
    return "u-" + safe_path_component(owner)


def repository(registry: str, namespace: str, owner: str, name: str) -> str:
    """``registry/namespace/u-<owner>/<name>``; :class:`InvalidPackage` when too long."""
    host = registry.split(":", 1)[0]
    if not _REGISTRY.fullmatch(registry) or (
        "." not in host and ":" not in registry and host != "localhost"
    ):
        # Docker reads a first component without '.', ':' or 'localhost' as a Docker Hub
        # namespace: "registry/x" would go to Docker Hub.
        raise ValueError(f"registry must be host[:port] with a '.' or a port, got {registry!r}")
    parts = namespace.split("/") if namespace else []
    if not all(repository_component(p) for p in parts):
        raise ValueError(f"namespace must be lowercase repository components, got {namespace!r}")
    path = "/".join([*parts, owner_component(owner), image_name(name)])
    if len(path) > REFERENCE_MAX:
        most = REFERENCE_MAX - (len(path) - len(name))
        raise InvalidPackage(
            f"With your username, an image name may have at most {most} characters; "
            "choose a shorter one."
            if most > 0
            else "This hub's registry path is too long for your username; tell your admin."
        )
    return f"{registry}/{path}"


def tag_for(created: datetime, build_id: str) -> str:
    """A tag from the save's time (UTC) and build: ``20261124-153000-3f2a9c``."""
    if not _BUILD_ID.fullmatch(build_id):
        raise ValueError(f"build id must be hex, got {build_id!r}")
    return created.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S-") + build_id[:6]


def image_labels(
    owner: str, name: str, base_slug: str, base_image: str, plan: Plan, created: datetime
) -> dict[str, str]:
    """The labels of a saved image (through the build API). The base's catalog slug
    label is blanked: a saved image is not the catalog image it was built from."""
    return {
        LABEL + "format": FORMAT,
        LABEL + "owner": owner,
        LABEL + "name": name,
        LABEL + "base-slug": base_slug,
        LABEL + "base-image": base_image,
        LABEL + "packages": json.dumps(list(plan.packages)),
        LABEL + "created": created.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "io.jupyterhub-gpu.catalog-slug": "",
    }


def saved_from_labels(
    labels: Mapping[str, str], reference: str, digest: str = "", size_bytes: int = 0
) -> SavedImage | None:
    """A :class:`SavedImage` from an image's labels (as the registry or an engine lists
    them), or ``None`` when they are not a saved image's (missing or malformed)."""
    try:
        if labels.get(LABEL + "format") != FORMAT:
            return None
        packages = json.loads(labels[LABEL + "packages"])
        created = datetime.fromisoformat(labels[LABEL + "created"])
        fields = [labels[LABEL + k] for k in ("owner", "name", "base-slug", "base-image")]
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        return None
    if not all(isinstance(f, str) and f for f in fields) or created.tzinfo is None:
        return None
    return SavedImage(
        owner=fields[0],
        name=fields[1],
        base_slug=fields[2],
        base_image=fields[3],
        reference=reference,
        packages=tuple(packages),
        size_bytes=size_bytes,
        created=created,
        digest=digest,
    )
