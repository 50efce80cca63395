"""Where a site's files live, and how the admin's commands write them.

One layout for every command (``site init``, ``certs``, ``units install``,
``check-config``): configuration under ``/etc/jupyterhub-gpu``, state under
``/var/lib/jupyterhub-gpu`` (both overridable, so tests use temporary folders), nothing
relative to a working directory. Files are written whole or not at all, by the package's
one atomic writer (edges/files.py: a temporary file in the same folder, then a rename);
secrets and keys are created 0600 from the start (never chmod-ed after being written
readable), every mode set explicitly whatever the caller's umask: 0700 for ``secrets/``
and ``tls/`` (:func:`private_dir`), 0600 keys, 0644 certificates.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from jupyterhub_gpu.edges.files import commit, staged
from jupyterhub_gpu.edges.files import write_atomic as atomic

DEFAULT_ETC = Path("/etc/jupyterhub-gpu")
DEFAULT_STATE = Path("/var/lib/jupyterhub-gpu")
SECRET_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


@dataclass(frozen=True)
class Site:
    """A site's paths; ``etc`` holds configuration and secrets, ``state`` what the hub
    writes (its database, the accounting database, the culler's files)."""

    etc: Path = DEFAULT_ETC
    state: Path = DEFAULT_STATE

    @property
    def config(self) -> Path:
        return self.etc / "jupyterhub_config.py"

    @property
    def catalog(self) -> Path:
        return self.etc / "catalog.yaml"

    @property
    def nodes_file(self) -> Path:
        return self.etc / "nodes.yaml"

    @property
    def secrets(self) -> Path:
        return self.etc / "secrets"

    @property
    def site_secret(self) -> Path:
        """The node agents' site secret: each node's token is derived from it."""
        return self.secrets / "site-secret"

    @property
    def cookie_secret(self) -> Path:
        """JupyterHub's cookie secret; it also keys the containers' seals."""
        return self.secrets / "cookie-secret"

    @property
    def hub_env(self) -> Path:
        """The hub's environment (``EnvironmentFile=``): JUPYTERHUB_CRYPT_KEY, LDAP bind
        password."""
        return self.secrets / "hub.env"

    @property
    def tls(self) -> Path:
        return self.etc / "tls"

    @property
    def ca_cert(self) -> Path:
        return self.tls / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.tls / "ca-key.pem"

    @property
    def hub_cert(self) -> Path:
        """The hub's client certificate for the nodes' Docker APIs."""
        return self.tls / "hub-cert.pem"

    @property
    def hub_key(self) -> Path:
        return self.tls / "hub-key.pem"

    @property
    def public_cert(self) -> Path:
        """The hub's public HTTPS certificate (logins), from the site's CA (``certs
        public``); a site with its own certificate names that one in its configuration."""
        return self.tls / "public-cert.pem"

    @property
    def public_key(self) -> Path:
        return self.tls / "public-key.pem"

    @property
    def join_cert(self) -> Path:
        """The join service's server certificate (``node token`` makes it), from the site's CA."""
        return self.tls / "join-cert.pem"

    @property
    def join_key(self) -> Path:
        return self.tls / "join-key.pem"

    @property
    def registry_cert(self) -> Path:
        """The site registry's server certificate (``registry install``), from the site's CA."""
        return self.tls / "registry-cert.pem"

    @property
    def registry_key(self) -> Path:
        return self.tls / "registry-key.pem"

    @property
    def registry_dir(self) -> Path:
        """The site registry's configuration (``registry install``): its presence turns the
        pre-puller on in the site's configuration."""
        return self.etc / "registry"

    @property
    def registry_storage(self) -> Path:
        """Where the site registry keeps its images."""
        return self.state / "registry"

    @property
    def site_env(self) -> Path:
        """This machine's site values (``units install``), read by its units and shells."""
        return self.etc / "site.env"

    def node_dir(self, node: str) -> Path:
        """On the hub: what node ``node`` needs, copied to the node's ``etc/tls``."""
        return self.tls / "nodes" / node

    # on a GPU node (the node's folder from node_dir, copied to etc/tls)
    @property
    def node_cert(self) -> Path:
        return self.tls / "cert.pem"

    @property
    def node_key(self) -> Path:
        return self.tls / "key.pem"

    @property
    def agent_token(self) -> Path:
        """On a GPU node: that node's own agent token (``jupyterhub-gpu-agent
        --print-token`` on the hub)."""
        return self.etc / "agent.token"

    # state
    @property
    def hub_db(self) -> Path:
        return self.state / "jupyterhub.sqlite"

    @property
    def accounting_db(self) -> Path:
        return self.state / "accounting.sqlite"

    @property
    def cull_notes(self) -> Path:
        return self.state / "cull-notes.json"

    @property
    def cull_deadlines(self) -> Path:
        return self.state / "cull-deadlines.json"

    @property
    def ssh_host_key(self) -> Path:
        """The SSH gateway's host key (docs/ssh.md), made by the gateway on first start."""
        return self.state / "ssh_host_ed25519_key"


def add_site_args(p: argparse.ArgumentParser) -> None:
    """``--etc`` and ``--state``: where a command finds the site's files."""
    p.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
    p.add_argument("--state", type=Path, default=DEFAULT_STATE, help=f"default {DEFAULT_STATE}")


def site_from_args(args: argparse.Namespace) -> Site:
    """The site that :func:`add_site_args`' options name, its folders absolute."""
    return Site(etc=args.etc.absolute(), state=args.state.absolute())


def package_file(*parts: str) -> Path:
    """A file shipped in the package under ``jupyterhub_gpu/cli/files``."""
    return Path(str(resources.files("jupyterhub_gpu.cli").joinpath("files", *parts)))


def render(template: str, values: dict[str, str]) -> str:
    """``@NAME@`` placeholders replaced; a placeholder left over is a bug, not output."""
    out = template
    for key, value in values.items():
        out = out.replace(f"@{key}@", value)
    if "@" in out:
        import re

        left = sorted(set(re.findall(r"@[A-Z_]+@", out)))
        if left:
            raise ValueError(f"template placeholders without a value: {left}")
    return out


def private_dir(path: Path) -> Path:
    """``path`` exists as a folder with mode 0700 exactly: made so, or closed if it was
    open. The caller's umask decides nothing (a folder of keys is never 0777)."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    path.chmod(PRIVATE_DIR_MODE)
    return path


def write_atomic(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """``path`` holds ``data`` with ``mode``, or is unchanged if anything failed; its
    folder is made if missing (the package's one atomic writer, edges/files.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic(path, data.encode() if isinstance(data, str) else data, mode)


def write_all(files: dict[Path, tuple[bytes, int]]) -> None:
    """Several files replaced together: every one is staged first, then each moved into
    place; a failure while staging leaves every file as it was."""
    done: list[tuple[Path, Path]] = []
    try:
        for path, (data, mode) in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            done.append((staged(path, data, mode), path))
    except BaseException:
        for tmp, _ in done:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in done:
        commit(tmp, path)
