"""``jupyterhub-gpu images publish``: the catalog's images into the site's registry.

Run on the hub, after the images were built (``images/build.py``: docs/images.md) or
pulled into the hub's own Docker: each catalog image found there is tagged for the
registry's push side (127.0.0.1:5444, ``registry install``), pushed, and untagged again;
the site's catalog then names it in the registry as the nodes reach it, pinned by the
digest the push gave (``HUB_IP:5443/jupyterhub-gpu/python-cpu:3.11-bookworm@sha256:...``),
so a rebuilt image published again is a new reference that the pre-puller pulls anew.
The catalog file is rewritten in place, comments and all, and only where a reference
changed (:func:`~jupyterhub_gpu.wire.adminfiles.with_catalog_images`); the hub re-reads
it, and its pre-puller starts a round within seconds (docs/prepull.md).

An image that is not on this machine is pulled first when its reference names a
registry (``nvcr.io/...``); one without a registry host (``jupyterhub-gpu/...``, the
catalog's own) is never looked up on Docker Hub, where anyone may own that name: it is
named, with how to build it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyterhub_gpu.cli.layout import DEFAULT_ETC, Site, write_atomic
from jupyterhub_gpu.cli.site import configured_hub_ip
from jupyterhub_gpu.core.join import registry_address
from jupyterhub_gpu.errors import ConfigError

BUILD = "python3 images/build.py --only {slug} (docs/images.md)"


def split_reference(image: str) -> tuple[str, str, str]:
    """(registry host or "", path, tag) of an image reference (a digest dropped; the tag
    ``latest`` when it names none)."""
    name = image.split("@", 1)[0]
    first, slash, rest = name.partition("/")
    host = ""
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, name = first, rest
    path, tag = name, "latest"
    if ":" in name.rsplit("/", 1)[-1]:
        path, tag = name.rsplit(":", 1)
    return host, path, tag


def source_reference(image: str, registry: str) -> str:
    """What the hub's Docker calls the catalog's ``image``: its reference without the
    site registry's host (a published one names it) and without a digest."""
    host, path, tag = split_reference(image)
    if host and host != registry:
        return f"{host}/{path}:{tag}"
    return f"{path}:{tag}"


@dataclass(frozen=True)
class Published:
    slug: str
    reference: str  # as the catalog names it now
    size: int


@dataclass(frozen=True)
class NotPublished:
    slug: str
    why: str  # a sentence; "" when the image is simply not built here


def _docker() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as e:  # docker-py's, requests' and the OS's errors alike
        raise ConfigError(
            f"this machine's Docker does not answer ({str(e)[:200]}): the catalog's images "
            "are built and pushed from the hub's Docker (docs/images.md); start it, or set "
            "DOCKER_HOST"
        ) from None
    return client.api


def _push_side_answers(address: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=5) as r:
            return int(r.status) == 200
    except OSError:
        return False


def _present(api: Any, reference: str) -> dict[str, Any] | None:
    import docker

    try:
        return dict(api.inspect_image(reference))
    except docker.errors.ImageNotFound:
        return None


def _stream_error(events: Any) -> tuple[str, str]:
    """(the error a push or pull stream reported, the pushed digest)."""
    digest = ""
    for event in events:
        if not isinstance(event, dict):
            continue
        message = event.get("error") or (event.get("errorDetail") or {}).get("message")
        if message:
            return str(message), digest
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            digest = str(aux["Digest"])
    return "", digest


def publish_one(
    api: Any, slug: str, image: str, registry: str, push: str
) -> Published | NotPublished:
    """One catalog image pushed through ``push`` (the registry's loopback side); what the
    catalog names now, or why it was not published."""
    source = source_reference(image, registry)
    host, path, tag = split_reference(source)
    if _present(api, source) is None:
        if not host:
            return NotPublished(slug, "")  # ours, not built here: never from Docker Hub
        error, _ = _stream_error(api.pull(source, stream=True, decode=True))
        if error or _present(api, source) is None:
            return NotPublished(slug, f"{source} is not here and its pull failed ({error[:200]})")
    target = f"{push}/{path}"
    print(f"pushing {slug} ({source}) into the site's registry ...", flush=True)
    api.tag(source, target, tag)
    try:
        error, digest = _stream_error(api.push(target, tag=tag, stream=True, decode=True))
    finally:
        api.remove_image(f"{target}:{tag}", noprune=True)  # the push's name only
    if error or not digest:
        return NotPublished(slug, f"pushing {source} to {push} failed ({error[:200] or '?'})")
    info = _present(api, source) or {}
    return Published(slug, f"{registry}/{path}:{tag}@{digest}", int(info.get("Size") or 0))


def publish(site: Site, only: list[str]) -> tuple[list[Published], list[NotPublished]]:
    """Every catalog image (or those of ``only``) into the site's registry, the catalog
    rewritten to name them there; (published, not published with why)."""
    from jupyterhub_gpu.cli.registry import push_address
    from jupyterhub_gpu.edges.adminfiles import load_catalog
    from jupyterhub_gpu.wire.adminfiles import with_catalog_images

    if not site.registry_dir.is_dir():
        raise ConfigError(
            f"this site runs no registry ({site.registry_dir} is missing): jupyterhub-gpu "
            f"registry install --etc {site.etc} first (docs/images.md)"
        )
    registry, push = registry_address(configured_hub_ip(site)), push_address()
    if not _push_side_answers(push):
        raise ConfigError(
            f"the site registry's push side does not answer on {push}: systemctl start "
            "jupyterhub-gpu-registry-push (journalctl -u jupyterhub-gpu-registry-push says why)"
        )
    catalog = load_catalog(site.catalog)
    unknown = [s for s in only if catalog.get(s) is None]
    if unknown:
        raise ConfigError(f"{site.catalog} has no entry {', '.join(unknown)}: give its slugs")
    api = _docker()
    done: list[Published] = []
    refused: list[NotPublished] = []
    changed: dict[str, str] = {}
    for entry in catalog:
        if only and entry.slug not in only:
            continue
        outcome = publish_one(api, entry.slug, entry.image, registry, push)
        if isinstance(outcome, NotPublished):
            refused.append(outcome)
            continue
        done.append(outcome)
        if outcome.reference != entry.image:
            changed[entry.slug] = outcome.reference
    if changed:
        text = with_catalog_images(site.catalog.read_text(), changed, str(site.catalog))
        write_atomic(site.catalog, text, site.catalog.stat().st_mode & 0o777)
    return done, refused


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu images",
        description="The catalog's images in the site's registry (docs/images.md).",
    )
    sub = p.add_subparsers(dest="action", required=True)
    pub = sub.add_parser("publish", help="push the catalog's images from this machine's Docker "
                         "into the site's registry; the catalog names them there")  # fmt: skip
    pub.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
    pub.add_argument("--only", action="append", default=[], metavar="SLUG",
                     help="this catalog entry only (repeat)")  # fmt: skip
    args = p.parse_args(argv)
    site = Site(etc=args.etc.absolute())
    try:
        done, refused = publish(site, args.only)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    from jupyterhub_gpu.core.progress import size_words

    for item in done:
        print(f"published {item.slug}: {item.reference} ({size_words(item.size)})")
    for miss in refused:
        if miss.why:
            print(f"not published {miss.slug}: {miss.why}", file=sys.stderr)
    absent = [miss.slug for miss in refused if not miss.why]
    if absent:
        print(f"not built on this machine, so not published: {', '.join(absent)}; build each "
              f"with {BUILD.format(slug='SLUG')}, then publish again", file=sys.stderr)  # fmt: skip
    if done:
        print(f"{site.catalog} names them in the site's registry; the hub's pre-puller puts "
              "them on the nodes (docs/prepull.md)")  # fmt: skip
    return 0 if done or not refused else 1
