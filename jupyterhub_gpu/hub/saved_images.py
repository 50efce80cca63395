"""The admin's settings for saved images: ``c.SavedImages.*`` (docs/my-images.md).

A traitlets ``Configurable`` read from the hub's configuration like the spawner's own
settings (``jupyterhub_config.py``; unknown keys stop the hub at start, config.py).
:meth:`SavedImages.save_settings` turns them into the builder's plain data.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Dict, Float, Int, List, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.core.catalog.entries import IMAGE_RE
from jupyterhub_gpu.core.saving.data import BuilderPolicy
from jupyterhub_gpu.core.saving.indexes import NAME_PATTERN
from jupyterhub_gpu.core.saving.limits import Limits
from jupyterhub_gpu.edges.builder.build import BuildSettings
from jupyterhub_gpu.edges.builder.save import SaveSettings
from jupyterhub_gpu.edges.builder.wheelhouse import IndexSettings

GIB = 2**30


def _limit_bytes(gib: float) -> int | None:
    return None if gib <= 0 else int(gib * GIB)


class SavedImages(LoggingConfigurable):
    """Saving users' environments as images: the registry, the package index the hub
    fetches from, and per-user limits. Saving is off until ``registry`` is set."""

    registry = Unicode(
        "",
        help="""The registry saved images are pushed to and pulled from, as image
        references name it: ``host[:port]`` (e.g. ``registry.lab.example:5000``). Every
        node's engine must be able to push to and pull from it. Empty: saving is off
        (the My images page says so). Keep it out of reach of user containers (the node
        firewall does this for the site's private addresses) or require authentication:
        a registry users can read directly shows them everyone's private images.""",
    ).tag(config=True)

    registry_url = Unicode(
        "",
        help="""The registry's HTTP API, for deleting images (``DELETE /v2/.../manifests``;
        the registry needs ``storage.delete.enabled``). Default: ``https://`` + registry.""",
    ).tag(config=True)

    registry_username = Unicode(
        "",
        help="""The user the hub and the nodes' engines log in to the registry as (pushes
        from the node that saves, pulls of saved images on any node, deletes from the
        hub). Empty: the registry asks for no credentials.""",
    ).tag(config=True)

    registry_password = Unicode(
        "",
        help="""That user's password or token (e.g. from an environment variable in
        ``jupyterhub_config.py``). Sent to the nodes' engines with each push and pull of a
        saved image and to the registry; never logged or shown.""",
    ).tag(config=True)

    namespace = Unicode(
        "jupyterhub-gpu/saved",
        help="Repository prefix under the registry; each user's images go under "
        "``<namespace>/u-<user>/<name>``.",
    ).tag(config=True)

    python_path = Unicode(
        "/opt/venv/bin/python",
        help="The Python of the catalog images that saved packages are installed into.",
    ).tag(config=True)

    index_url = Unicode(
        "",
        help="""The default package index the hub fetches saved packages from (a PEP 503
        simple index, e.g. ``https://pypi.org/simple``): it serves every name that no
        ``index_for`` entry pins and no ``extra_index_urls`` index lists. Empty: the index
        of pip's own configuration of the hub's environment (``pip.conf``,
        ``PIP_INDEX_URL``); that configuration's extra indexes and find-links are not
        used (list them here).""",
    ).tag(config=True)

    extra_index_urls = List(
        Unicode(),
        help="""More indexes, searched BEFORE ``index_url``, in this order (uv's
        ``first-index`` rule, against dependency confusion): each package name is taken
        from the first of them whose simple API lists the name, and from that index
        only, never from two; a name none of them lists comes from ``index_url``. So a
        private index here keeps its names even when someone publishes the same name,
        at any version or build, on ``index_url``. An index here that does not answer
        stops the save (it is never skipped). E.g. ``["https://download.pytorch.org/whl/cu121"]``
        (which also lists numpy and others: pin those with ``index_for`` if its versions
        don't suit).""",
    ).tag(config=True)

    index_for = Dict(
        value_trait=Unicode(),
        key_trait=Unicode(),
        help="""Package names, or patterns of names with ``*`` and ``?``, and the one
        index each is taken from, whatever the other indexes list (uv's pinning of a
        package to an index); a pinned name not found there is not looked for elsewhere.
        An exact name wins over patterns; otherwise the first matching pattern, in this
        order. E.g. ``{"ourlab-*": "https://pypi.ourlab.example/simple",
        "torch": "https://download.pytorch.org/whl/cu121"}``. Default: none.""",
    ).tag(config=True)

    find_links = List(
        Unicode(),
        help="Folders or pages of wheels (pip's --find-links), e.g. an offline mirror.",
    ).tag(config=True)

    no_index = Bool(
        False, help="Use only ``find_links`` (pip's --no-index): a fully offline site."
    ).tag(config=True)

    trusted_hosts = List(Unicode(), help="pip's --trusted-host, for an index over HTTP.").tag(
        config=True
    )

    allowed_index_urls = List(
        Unicode(),
        help="""URL prefixes a package installed from a URL (``pip install https://...``)
        may come from; such a package is then fetched again by name and version. Empty:
        packages installed from a URL are left out of saved images.""",
    ).tag(config=True)

    max_images = Int(5, help="Saved images per user (0: no limit).").tag(config=True)

    max_image_gib = Float(
        20.0, help="GiB a saved image may add to its base image (0: no limit)."
    ).tag(config=True)

    max_total_gib = Float(
        50.0, help="GiB all of a user's saved images may add together (0: no limit)."
    ).tag(config=True)

    build_timeout = Float(1800.0, help="Seconds a build may take on the node.").tag(config=True)

    push_timeout = Float(1800.0, help="Seconds a push to the registry may take.").tag(config=True)

    build_memory_gib = Float(
        4.0, help="Memory of the build's install step on the node, GiB (0: no limit)."
    ).tag(config=True)

    build_cpus = Float(
        2.0,
        help="""CPUs the build's install steps may use on the node, together (the CFS
        quota of each step's container; fractions allowed, e.g. 0.5). 0: no limit. The
        install steps run package code as root (a package's ``.pth`` files run at every
        Python start), so this bounds what a hostile package takes from the node's users
        for up to ``build_timeout``.""",
    ).tag(config=True)

    build_max_processes = Int(
        256,
        help="""Processes one install step of a build may have. A step that reaches it
        is stopped and the save fails with a sentence (a fork bomb in a package); pip
        itself needs a handful. Docker's build API has no process limit, so the hub
        watches the build's containers and sets the engine's limit on each as it starts
        (a fraction of a second after); ``build_cgroup_parent`` closes that gap. 0: no
        limit (not advised).""",
    ).tag(config=True)

    build_cgroup_parent = Unicode(
        "",
        help="""The cgroup the build's install steps run under on every node (the build
        API's ``cgroupparent``), e.g. a systemd slice ``jupyterhub-gpu-builds.slice`` with
        ``TasksMax=512``, ``CPUQuota=200%`` and ``MemoryMax=8G``, or with the cgroupfs
        driver a path such as ``/jupyterhub-gpu-builds`` whose ``pids.max`` the node's
        set-up writes: limits every build on the node shares, from the first instant.
        The engine must accept it (a systemd driver takes slice names only). Empty: the
        engine's default.""",
    ).tag(config=True)

    concurrent_saves = Int(
        2,
        help="Saves the hub runs at once (each is a build on a node); more wait. A user "
        "has at most one save running or waiting, and waiting saves start in the order "
        "they were asked, whoever asked; the page tells a waiting user how many saves are "
        "ahead.",
    ).tag(config=True)

    node_sweep_interval = Float(
        300.0,
        help="""Seconds between two sweeps of the nodes for saved images that no record
        names any more (deleted while a container used them or while their node was
        down; a save a hub left half-done): each node removes those that no container,
        running or stopped, uses. A delete also sweeps at once. 0: only at deletes.""",
    ).tag(config=True)

    @default("registry_url")
    def _default_registry_url(self) -> str:
        return f"https://{self.registry}" if self.registry else ""

    @validate("registry")
    def _valid_registry(self, proposal: Any) -> str:
        value = str(proposal["value"]).strip().rstrip("/")
        if value and not IMAGE_RE.match(f"{value}/x:y"):
            raise ValueError(f"SavedImages.registry must be host[:port], got {value!r}")
        return value

    @validate("index_for")
    def _valid_index_for(self, proposal: Any) -> dict[str, str]:
        value = dict(proposal["value"])
        for name, url in value.items():
            if not NAME_PATTERN.match(name):
                raise ValueError(
                    f"SavedImages.index_for: {name!r} is not a package name or a pattern of "
                    "one (letters, digits, '.', '_', '-', '*', '?')"
                )
            if not url.startswith(("https://", "http://", "file://")):
                raise ValueError(
                    f"SavedImages.index_for[{name!r}] must be an index URL (https://, http:// "
                    f"or file://), got {url!r}"
                )
        return value

    @validate("node_sweep_interval")
    def _not_negative_interval(self, proposal: Any) -> float:
        if float(proposal["value"]) < 0:
            raise ValueError("SavedImages.node_sweep_interval must be 0 (off) or more seconds")
        return float(proposal["value"])

    @validate("max_images")
    def _not_negative(self, proposal: Any) -> int:
        if int(proposal["value"]) < 0:
            raise ValueError("SavedImages.max_images must be 0 (no limit) or more")
        return int(proposal["value"])

    @validate("build_cpus")
    def _cpus(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if value < 0 or 0 < value < 0.01:
            raise ValueError("SavedImages.build_cpus must be 0 (no limit) or at least 0.01")
        return value

    @validate("build_max_processes")
    def _processes(self, proposal: Any) -> int:
        value = int(proposal["value"])
        if value < 0 or 0 < value < 16:
            raise ValueError(
                "SavedImages.build_max_processes must be 0 (no limit) or at least 16 "
                "(pip needs a few)"
            )
        return value

    @validate("concurrent_saves")
    def _at_least_one(self, proposal: Any) -> int:
        if int(proposal["value"]) < 1:
            raise ValueError("SavedImages.concurrent_saves must be 1 or more")
        return int(proposal["value"])

    @property
    def prefix(self) -> str:
        """Where saved images live: ``<registry>/<namespace>/``."""
        return f"{self.registry}/{self.namespace.strip('/')}/"

    @validate("registry_password")
    def _needs_user(self, proposal: Any) -> str:
        if proposal["value"] and not self.registry_username:
            raise ValueError("SavedImages.registry_password needs SavedImages.registry_username")
        return str(proposal["value"])

    @property
    def enabled(self) -> bool:
        return bool(self.registry)

    @property
    def credentials(self) -> tuple[str, str] | None:
        """(user, password) for the registry's HTTP API, or None."""
        if not self.registry_username:
            return None
        return self.registry_username, self.registry_password

    def auth_config(self, image: str = "") -> dict[str, str] | None:
        """What a node's engine needs to push or pull ``image`` (any saved image when
        empty): the credentials, only for images under this registry's namespace."""
        if self.credentials is None or (image and not image.startswith(self.prefix)):
            return None
        user, password = self.credentials
        return {"username": user, "password": password, "serveraddress": self.registry}

    def save_settings(self) -> SaveSettings:
        """The builder's settings (raises nothing; an empty registry means saving is off
        and callers check :attr:`enabled` first)."""
        return SaveSettings(
            registry=self.registry,
            namespace=self.namespace,
            python_path=self.python_path,
            policy=BuilderPolicy(allowed_index_urls=tuple(self.allowed_index_urls)),
            index=IndexSettings(
                index_url=self.index_url or None,
                extra_index_urls=tuple(self.extra_index_urls),
                index_for=tuple(self.index_for.items()),
                find_links=tuple(self.find_links),
                no_index=self.no_index,
                trusted_hosts=tuple(self.trusted_hosts),
            ),
            build=BuildSettings(
                build_timeout_s=self.build_timeout,
                push_timeout_s=self.push_timeout,
                memory_bytes=_limit_bytes(self.build_memory_gib),
                cpus=self.build_cpus or None,
                max_processes=self.build_max_processes or None,
                cgroup_parent=self.build_cgroup_parent,
                auth_config=self.auth_config(),
            ),
            limits=Limits(
                max_images=self.max_images or None,
                max_image_bytes=_limit_bytes(self.max_image_gib),
                max_total_bytes=_limit_bytes(self.max_total_gib),
            ),
        )
