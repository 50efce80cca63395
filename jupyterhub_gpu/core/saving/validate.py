"""Validation of everything a saved image is made from. Pure.

Names and versions come from files in a user's home, which the user controls: they are
checked against the standards (PEP 508 names, PEP 503 normalisation, PEP 440 versions)
with ``packaging``, in ASCII only (Python's ``re`` with ``IGNORECASE`` would let the
Kelvin sign pass for a ``k``), with length caps, and re-written from the parsed parts:
what reaches pip is always ``canonical-name==normalised-version``, never the user's
text. Debian package names must be on the admin's allow-list. URLs are refused unless
they sit under an index the admin allows.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Iterable
from urllib.parse import urlsplit

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from jupyterhub_gpu.core.saving.data import InvalidPackage, PipRequirement
from jupyterhub_gpu.errors import ConfigError

NAME_MAX = 100  #: characters in a distribution name (PyPI's longest are ~80)
VERSION_MAX = 64  #: characters in a version string
IMAGE_NAME_MAX = 40  #: characters in a saved image's name

# PEP 508 names, ASCII only (re.ASCII: no Unicode case folding).
_PEP508_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE | re.ASCII)
# Debian policy 5.6.1: lower case letters, digits, + - . ; at least two; starts alphanumeric.
_DEBIAN_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$", re.ASCII)
# One component of a Docker repository path (distribution/reference grammar).
_REPO_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$", re.ASCII)


def _shown(text: str, limit: int = 60) -> str:
    """The user's text for a message: repr, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def pip_name(name: str) -> str:
    """The PEP 503 name of a distribution, or :class:`InvalidPackage`."""
    if (
        not isinstance(name, str)
        or len(name) > NAME_MAX
        or not name.isascii()
        or not _PEP508_NAME.fullmatch(name)
    ):
        raise InvalidPackage(
            f"The package name {_shown(str(name))} is not a valid Python package name; "
            "remove that package from your environment and try again."
        )
    return canonicalize_name(name)


def pip_version(version: str, name: str = "the package") -> str:
    """The normalised PEP 440 version, or :class:`InvalidPackage`."""
    ok = (
        isinstance(version, str)
        and 0 < len(version) <= VERSION_MAX
        and version.isascii()
        and version == version.strip()
    )
    try:
        if ok:
            return str(Version(version))
    except InvalidVersion:
        pass
    raise InvalidPackage(
        f"The version {_shown(str(version))} of {name} is not a valid Python package version; "
        "reinstall that package from the site's index, or remove it, and try again."
    )


def pip_requirement(name: str, version: str) -> PipRequirement:
    """A pinned requirement built from validated parts (never from the user's text)."""
    canonical = pip_name(name)
    return PipRequirement(canonical, pip_version(version, repr(canonical)))


def apt_names(names: Iterable[str], allowlist: Collection[str]) -> tuple[str, ...]:
    """The Debian package names a user asked for, each on the admin's allow-list,
    sorted without duplicates; :class:`InvalidPackage` names the first that is not."""
    result: set[str] = set()
    for name in names:
        if not isinstance(name, str) or len(name) > NAME_MAX or not _DEBIAN_NAME.fullmatch(name):
            raise InvalidPackage(
                f"{_shown(str(name))} is not a Debian package name; "
                "use names such as 'libsndfile1' from the list your admin allows."
            )
        if name not in allowlist:
            raise InvalidPackage(
                f"The Debian package {name!r} is not on this hub's list of packages a saved "
                "image may add; choose one from the list or ask your admin to add it."
            )
        result.add(name)
    return tuple(sorted(result))


def image_name(name: str) -> str:
    """A saved image's name: 1-40 lowercase letters and digits, single ``.``/``_`` or
    ``-`` between them (a Docker repository component)."""
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= IMAGE_NAME_MAX
        or not _REPO_COMPONENT.fullmatch(name)
    ):
        raise InvalidPackage(
            f"The image name {_shown(str(name))} can't be used; choose 1-{IMAGE_NAME_MAX} "
            "lowercase letters and digits, with '-', '_' or '.' between them, "
            "e.g. 'my-env-2'."
        )
    return name


NAME_TYPED_MAX = 200  #: characters of a typed name read at all


def image_name_from(text: str) -> str:
    """A saved image's name from what a person typed: a valid name as it is, else one
    derived from it: lowercase ASCII letters and digits (accents dropped), every other
    run of characters one ``-``, at most 40 (``My Einops env`` -> ``my-einops-env``).
    :class:`InvalidPackage` says the rule when nothing usable is left."""
    if (
        isinstance(text, str)
        and 0 < len(text) <= IMAGE_NAME_MAX
        and _REPO_COMPONENT.fullmatch(text)
    ):
        return text
    if isinstance(text, str) and len(text) <= NAME_TYPED_MAX:
        ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
        derived = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
        derived = derived[:IMAGE_NAME_MAX].rstrip("-")
        if derived:
            return derived
    raise InvalidPackage(
        f"The image name {_shown(str(text))} can't be used: give it a name of letters and "
        f"digits (spaces become '-', up to {IMAGE_NAME_MAX} characters), e.g. 'My Einops env', "
        "saved as 'my-einops-env'."
    )


def repository_component(name: str) -> bool:
    """Whether ``name`` may be one component of a Docker repository path."""
    return bool(_REPO_COMPONENT.fullmatch(name))


def index_url(url: str, where: str) -> str:
    """An admin's package index URL (settings): http(s), a host, no query or fragment.

    Credentials in the URL are allowed (a private mirror) but never shown again:
    messages use :func:`redact_url`."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if (
        parts is None
        or parts.scheme not in ("https", "http")
        or not parts.hostname
        or parts.query
        or parts.fragment
        or any(c.isspace() for c in url)
    ):
        raise ConfigError(
            f"{where}: must be an http(s) URL of a package index without query or fragment, "
            f"e.g. 'https://pypi.example.org/simple/', got {redact_url(str(url))!r}"
        )
    return url


def redact_url(url: str) -> str:
    """``url`` without user and password (for messages and logs)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def url_under(url: str, prefixes: Iterable[str]) -> bool:
    """Whether ``url`` (https or http, no credentials, no ``..``) starts with one of the
    admin's index ``prefixes`` at a path boundary."""
    parts = urlsplit(url)
    if (
        parts.scheme not in ("https", "http")
        or parts.username
        or parts.password
        or "/../" in f"{parts.path}/"
        or "%2e" in parts.path.lower()
        or not url.isascii()
        or any(c.isspace() for c in url)
    ):
        return False
    for prefix in prefixes:
        base = prefix if prefix.endswith("/") else prefix + "/"
        if url.startswith(base):
            return True
    return False
