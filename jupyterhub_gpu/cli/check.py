"""``jupyterhub-gpu check-config``: a site's configuration checked without starting a hub.

It loads the site's ``jupyterhub_config.py`` with traitlets' config loader, as
JupyterHub does; the file ends with ``check_config(c)`` (``jupyterhub_gpu.hub.config``),
which runs then: unknown keys of our classes, the nodes and the nodes file, the
inventory, the catalog, the bounds, the queue policy, the mounts. A configuration that
does not call it is a problem of its own. Then every file the configuration names must
exist and be readable: the site's secrets (and be readable by their owner only), the
cookie secret, the TLS files of every node (``nodes`` and the nodes file), the agents'
CA, the hub's TLS certificate, the nodes file, the catalog, the inventory; the folders
of the databases and the culler's files must exist. Logins over plain HTTP on an address
other machines reach are a problem of their own (``check_values.plain_http_problems``).
The hub's public HTTPS certificate (``ssl_cert``/``ssl_key``) must be valid now and its
key its own; one that expires within 14 days is a warning, which does not fail
(``core/public_cert.py`` decides).
Every section must be a class the hub runs, and every key a setting of it or of a class
extending it; example hosts and a loopback hub address with remote nodes are named
(``check_values``). A syntax error is one sentence with its line, and a bad nodes file
one line naming it.

Each problem is one sentence naming the file and what to do; the exit status is 1 when
there is any (the hub's unit runs this before each start), 0 when there is none.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import shutil
import stat
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyterhub_gpu.cli.check_values import (
    placeholder_problems,
    plain_http_problems,
    section_problems,
)
from jupyterhub_gpu.cli.layout import Site, add_site_args, site_from_args
from jupyterhub_gpu.errors import ConfigError

HUB_INSTALL = "pip install 'jupyterhub-gpu[hub]'"
#: defaults that put a database in the hub's working directory
RELATIVE_DEFAULTS = {
    "JupyterHub.db_url": "sqlite:///jupyterhub.sqlite",
    "GPUCluster.accounting_url": "sqlite:///jupyterhub-gpu-accounting.sqlite",
}


def _fix(site: Site, path: Path) -> str:
    """What to do about a missing file of the site's layout."""
    fixes = {
        site.ca_cert: f"make the site's CA: jupyterhub-gpu certs ca --etc {site.etc}",
        site.ca_key: f"make the site's CA: jupyterhub-gpu certs ca --etc {site.etc}",
        site.hub_cert: f"make it: jupyterhub-gpu certs hub --etc {site.etc}",
        site.hub_key: f"make it: jupyterhub-gpu certs hub --etc {site.etc}",
        site.site_secret: "restore it from the site's backup (a new one changes every node's "
        f"token), or make a new one with jupyterhub-gpu site init --force --etc {site.etc}",
        site.cookie_secret: "restore it from the site's backup (a new one logs everyone out), "
        f"or make a new one with jupyterhub-gpu site init --force --etc {site.etc}",
        site.hub_env: f"make it with jupyterhub-gpu site init --force --etc {site.etc}",
        site.nodes_file: "create it: jupyterhub-gpu site add-node NAME --address ADDR "
        f"--etc {site.etc}",
        site.catalog: f"copy a catalog there (jupyterhub-gpu site init --force --etc {site.etc})",
        site.public_cert: "make it: jupyterhub-gpu certs public --address HUB_IP [--dns NAME] "
        f"--etc {site.etc}",
        site.public_key: "make it: jupyterhub-gpu certs public --address HUB_IP [--dns NAME] "
        f"--etc {site.etc}",
    }
    if path in fixes:
        return fixes[path]
    if path.parent.parent == site.tls / "nodes" or path.parent.parent.name == "nodes":
        return f"make it: jupyterhub-gpu certs node {path.parent.name} --address ADDR"
    return "check the path in the configuration, or put the file there"


def file_problems(path: Path, what: str, fix: str, *, secret: bool = False) -> list[str]:
    """Problems of one file the hub reads at start: missing, not a file, unreadable, or
    (for a secret or a key) readable by others."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return [f"{path} ({what}) does not exist: {fix}."]
    except OSError as e:
        return [f"{path} ({what}) cannot be reached ({e.strerror}): check its folders' modes."]
    if not stat.S_ISREG(st.st_mode):
        return [f"{path} ({what}) is not a file: put the file there ({fix})."]
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as e:
        return [
            f"{path} ({what}) cannot be read ({e.strerror}): the hub runs as root; "
            f"make it readable by its owner (chmod 600 {path})."
        ]
    if secret and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return [
            f"{path} ({what}) can be read by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"chmod 600 {path}."
        ]
    return []


def folder_problems(path: Path, what: str) -> list[str]:
    folder = path.parent
    if not folder.is_dir():
        return [
            f"{folder} (the folder of {what}, {path}) does not exist: create it "
            f"(mkdir -m 700 -p {folder}) or point the setting elsewhere."
        ]
    return []


def _sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///") :])
    return None


def _section(config: Any, *names: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in names:
        if name in config:
            merged.update(dict(config[name]))
    return merged


def _named_files(site: Site, config: Any, s: Mapping[str, Any]) -> Iterator[tuple[Path, str, bool]]:
    """(path, what it is, is it a secret) for every file the configuration names (``s``:
    the spawner's settings)."""
    hub = _section(config, "JupyterHub")
    if hub.get("cookie_secret_file"):
        yield Path(hub["cookie_secret_file"]), "JupyterHub.cookie_secret_file", True
    if hub.get("ssl_cert"):
        yield Path(hub["ssl_cert"]), "JupyterHub.ssl_cert", False
    if hub.get("ssl_key"):
        yield Path(hub["ssl_key"]), "JupyterHub.ssl_key", True
    for key in ("nodes_file", "catalog_file", "inventory_file"):
        if s.get(key):
            yield Path(s[key]), f"GPUCluster.{key}", False
    agents = _section(config, "AgentClient")
    if agents.get("ca_cert"):
        yield Path(agents["ca_cert"]), "AgentClient.ca_cert, the agents' CA", False
    for where, node in _nodes(s):
        tls = node.get("tls") or {}
        if isinstance(tls, Mapping):
            for field, value in sorted(tls.items()):
                yield (
                    Path(str(value)),
                    f"{where}, node {node.get('name')!r}, tls.{field}",
                    field == "client_key",
                )


def _nodes(s: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for node in s.get("nodes") or []:
        if isinstance(node, Mapping):
            yield "GPUCluster.nodes", node
    path = s.get("nodes_file")
    if path and Path(path).is_file():
        from jupyterhub_gpu.edges.adminfiles import load_nodes_file

        try:
            entries = load_nodes_file(str(path))
        except ConfigError:
            return  # check_config said why
        for node in entries:
            if isinstance(node, Mapping):
                yield str(path), node


def node_certificate_problems(site: Site, s: Mapping[str, Any]) -> list[str]:
    """Each node of the nodes file against the certificates ``certs node`` made for it
    (when the site makes them): the same name in both places, its address in the
    certificate's subjectAltName."""
    made = site.tls / "nodes"
    if not made.is_dir():
        return []
    from cryptography import x509

    found = []
    for where, node in _nodes(s):
        name, address = str(node.get("name")), str(node.get("address"))
        cert = site.node_dir(name) / "cert.pem"
        if not cert.is_file():
            others = ", ".join(sorted(p.name for p in made.iterdir())) or "none"
            found.append(
                f"{where} names node {name!r}, but {made} has no certificate for it (it has: "
                f"{others}): a name mistyped in one place, or make it: jupyterhub-gpu certs "
                f"node {name} --address {address} --etc {site.etc}."
            )
            continue
        try:
            names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions
            san = names.get_extension_for_class(x509.SubjectAlternativeName).value
            held = [str(entry.value) for entry in san]  # in the certificate's order
        except (OSError, ValueError, x509.ExtensionNotFound) as e:
            found.append(f"{cert} (node {name!r}) is not a certificate of ours ({e}).")
            continue
        if address not in held:
            found.append(
                f"{cert} is for {', '.join(held)}, not {address} ({where}, node {name!r}): "
                f"make it again: jupyterhub-gpu certs node {name} --address {address} --force "
                f"--etc {site.etc}, and copy it to the node."
            )
    return found


def _calls_check_config(config_path: Path) -> bool:
    tree = ast.parse(config_path.read_text(), str(config_path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            if name == "check_config":
                return True
    return False


def nodes_file_problem(s: Mapping[str, Any]) -> list[str]:
    """The nodes file's first problem, as one sentence naming the file (the hub's parser):
    one bad field is one line, not a line for each check that depends on the nodes."""
    path = s.get("nodes_file")
    if not path or not Path(path).is_file():
        return []
    from jupyterhub_gpu.edges.adminfiles import load_nodes_file
    from jupyterhub_gpu.wire.nodes_file import parse_nodes

    try:
        entries = load_nodes_file(str(path))
        if entries:
            parse_nodes(entries)
    except ConfigError as e:
        said = " ".join(str(e).split()).removeprefix(f"{path}: ")
        return [f"{path}: {said}; fix that entry (fields: docs/nodes.md)."]
    return []


def _about_nodes(problem: str, nodes_file: str) -> bool:
    """A problem the hub's check_config raised about the nodes (said by nodes_file_problem)."""
    return ": nodes" in problem or "nodes file" in problem or nodes_file in problem


def _load_problem(e: BaseException, config_path: Path, reported: set[Path]) -> str | None:
    if isinstance(e, ConfigError):
        return f"{config_path}: {e} (fix it in {config_path} or the file it names)."
    if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("jupyterhub_gpu."):
        return (
            f"{config_path}: it imports {e.name!r}, which jupyterhub-gpu does not have: an "
            "old path? docs/upgrade.md ('Import paths that went') names the new one."
        )
    if isinstance(e, ModuleNotFoundError):
        return (
            f"{config_path}: it imports {e.name!r}, which is not installed here: check-config "
            f"and the hub need the hub's install ({HUB_INSTALL})."
        )
    if isinstance(e, OSError) and e.filename:
        if Path(e.filename) in reported:
            return None  # said above, with what to do
        return f"{e.filename} (read by {config_path}) cannot be read ({e.strerror}): put it there."
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(config_path)]
    line = f", line {frames[-1].lineno}" if frames else ""
    return f"{config_path}{line}: {e or type(e).__name__}; fix that line."


def check(site: Site, config_path: Path) -> list[str]:
    """Every problem of the site's configuration, one sentence each."""
    return review(site, config_path)[0]


def review(site: Site, config_path: Path) -> tuple[list[str], list[str]]:
    """(every problem, every warning) of the site's configuration, one sentence each: a
    problem stops the hub's start, a warning (a certificate that expires soon) does not."""
    warnings: list[str] = []
    return _problems(site, config_path, warnings), warnings


def _problems(site: Site, config_path: Path, warnings: list[str]) -> list[str]:
    problems = file_problems(config_path, "the hub's configuration", _fix(site, config_path))
    if problems:
        return problems
    reported: set[Path] = set()
    problems += _secret_problems(site, config_path, reported)
    text = config_path.read_text(errors="replace")
    try:
        ast.parse(text, str(config_path))
    except SyntaxError as e:
        return [*problems, f"{config_path}, line {e.lineno}: {e.msg}: fix that line."]
    try:
        importlib.import_module("jupyterhub")
    except ImportError:
        return [*problems, f"{config_path}: the hub is not installed here ({HUB_INSTALL})."]
    config, said = _load_config(config_path, reported)
    s = _section(config, "Spawner", "DockerSpawner", "GPUDockerSpawner", "GPUCluster")
    bad_nodes = nodes_file_problem(s)
    if bad_nodes:  # one line for it: not the hub's error too, nor what follows from it
        said = [p for p in said if not _about_nodes(p, str(s["nodes_file"]))]
        s = {k: v for k, v in s.items() if k != "nodes_file"}
    problems += [*bad_nodes, *said]
    if not _calls_check_config(config_path):
        problems.append(
            f"{config_path} does not call check_config(c): add `from jupyterhub_gpu.hub.config "
            "import check_config` and `check_config(c)` at its end, so that the hub refuses a "
            "bad configuration at start."
        )
    problems += section_problems(config, config_path, text, "\n".join(said))
    missing: set[Path] = set()
    troubled: set[Path] = set()
    for path, what, secret in _named_files(site, config, s):
        if path in reported or (path == site.public_key and site.public_cert in missing):
            troubled.add(path)
            continue  # a missing public pair is one sentence: the command makes both
        reported.add(path)
        found = file_problems(path, what, _fix(site, path), secret=secret)
        missing.update([path] if found and not path.exists() else [])
        troubled.update([path] if found else [])
        problems += found
    problems += _public_cert_problems(site, config, troubled, warnings)
    problems += placeholder_problems(config, config_path, text, _nodes(s))
    problems += plain_http_problems(config, config_path, text, site.etc)
    hub = _section(config, "JupyterHub")
    # with the join service (configure_join), nodes join a running hub: none yet is fine
    joins = any(
        isinstance(svc, Mapping) and "node serve" in " ".join(map(str, svc.get("command", [])))
        for svc in hub.get("services") or []
    )
    if not joins:
        problems += _empty_nodes_problems(site, s)
    problems += node_certificate_problems(site, s)
    problems += _database_problems(site, config_path, hub, s, reported)
    if not hub.get("cookie_secret_file") and not hub.get("cookie_secret"):
        problems.append(
            f"{config_path}: JupyterHub.cookie_secret_file is not set, so the cookie secret "
            "(which also keys the containers' seals) lands in the hub's working directory: "
            f"set it to {site.cookie_secret}."
        )
    problems += _spawner_folder_problems(s, reported)
    return problems + proxy_problems(config, config_path)


def _public_cert_problems(
    site: Site, config: Any, troubled: set[Path], warnings: list[str]
) -> list[str]:
    """The hub's public HTTPS certificate (JupyterHub.ssl_cert and ssl_key, when both are
    set and readable): expired, expiring soon (into ``warnings``), not its key's."""
    hub = _section(config, "JupyterHub")
    if not hub.get("ssl_cert") or not hub.get("ssl_key"):
        return []
    cert, key = Path(hub["ssl_cert"]), Path(hub["ssl_key"])
    if cert in troubled or key in troubled:
        return []  # said above: missing or unreadable
    from jupyterhub_gpu.cli.certs import public_cert_facts
    from jupyterhub_gpu.core.public_cert import public_cert_lines

    ours = cert == site.public_cert  # made by the site's CA: certs renew renews it
    renew = f"jupyterhub-gpu certs renew public --etc {site.etc}" if ours else ""
    local = datetime.now().astimezone().tzinfo or timezone.utc
    lines = public_cert_lines(public_cert_facts(cert, key, renew), time.time(), local)
    warnings += lines.warnings
    return list(lines.problems)


def _secret_problems(site: Site, config_path: Path, reported: set[Path]) -> list[str]:
    """The site's secrets, when the configuration is the site's; each one with a problem
    goes into ``reported`` (said once)."""
    problems: list[str] = []
    for path, what in (
        (site.site_secret, "the node agents' site secret"),
        (site.cookie_secret, "the hub's cookie secret"),
        (site.hub_env, "the hub's environment, JUPYTERHUB_CRYPT_KEY"),
    ):
        if path.parent.parent == config_path.parent:  # the config is the site's
            found = file_problems(path, what, _fix(site, path), secret=True)
            problems += found
            reported.update([path] if found else [])
    return problems


def _load_config(config_path: Path, reported: set[Path]) -> tuple[Any, list[str]]:
    """The configuration as traitlets loads it (what it got before any error), and the
    problem that stopped it, if any."""
    from traitlets.config.loader import PyFileConfigLoader

    loader = PyFileConfigLoader(config_path.name, str(config_path.parent))
    problems: list[str] = []
    try:
        loader.load_config()
    except Exception as e:
        said = _load_problem(e, config_path, reported)
        if said:
            problems.append(said)
    return loader.config, problems


def _empty_nodes_problems(site: Site, s: Mapping[str, Any]) -> list[str]:
    """Neither GPUCluster.nodes nor the nodes file lists a node."""
    nodes_file = Path(s.get("nodes_file") or "")
    if "nodes" in s and not any(True for _ in _nodes(s)) and nodes_file.is_file():
        return [
            f"{nodes_file} (GPUCluster.nodes_file) lists no node and "
            "GPUCluster.nodes is empty: add each GPU node (jupyterhub-gpu site "
            f"add-node NAME --address ADDR --etc {site.etc})."
        ]
    return []


def _database_problems(
    site: Site,
    config_path: Path,
    hub: Mapping[str, Any],
    s: Mapping[str, Any],
    reported: set[Path],
) -> list[str]:
    """The hub's and the accounting's SQLite databases: absolute paths, in folders that exist
    (each folder once)."""
    problems: list[str] = []
    for url, what in (
        (hub.get("db_url", RELATIVE_DEFAULTS["JupyterHub.db_url"]), "JupyterHub.db_url"),
        (
            s.get("accounting_url", RELATIVE_DEFAULTS["GPUCluster.accounting_url"]),
            "GPUCluster.accounting_url",
        ),
    ):
        db = _sqlite_path(str(url))
        if db is not None and not db.is_absolute():
            problems.append(
                f"{config_path}: {what} {url!r} is relative to the hub's working directory: "
                f"name an absolute path (e.g. sqlite:///{site.state / db.name})."
            )
        elif db is not None and db.parent not in reported:
            reported.add(db.parent)
            problems += folder_problems(db, what)
    return problems


def _spawner_folder_problems(s: Mapping[str, Any], reported: set[Path]) -> list[str]:
    """The folders of the culler's and the drains' files must exist (each folder once)."""
    problems: list[str] = []
    for key in ("cull_notes_file", "cull_deadlines_file", "cull_warnings_file", "drains_file"):
        if s.get(key) and Path(s[key]).parent not in reported:  # each folder once
            reported.add(Path(s[key]).parent)
            problems += folder_problems(Path(s[key]), f"GPUCluster.{key}")
    return problems


def proxy_problems(config: Any, config_path: Path) -> list[str]:
    """The proxy the hub starts must be installed (JupyterHub only says so at start)."""
    proxy = _section(config, "ConfigurableHTTPProxy")
    if proxy.get("should_start", True) is False:
        return []
    command = proxy.get("command") or ["configurable-http-proxy"]
    first = str(command[0] if isinstance(command, list | tuple) and command else command)
    if shutil.which(first) is None:
        return [
            f"{config_path}: the proxy the hub starts, {first!r}, is not installed here: "
            "install Node.js, then `npm install -g configurable-http-proxy` (docs/install.md), "
            "or set ConfigurableHTTPProxy.command."
        ]
    return []


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu check-config",
        description="Check a site's configuration and the files it names, without a hub.",
    )
    add_site_args(p)
    p.add_argument("config", nargs="?", type=Path, help="default: ETC/jupyterhub_config.py")
    args = p.parse_args(argv)
    site = site_from_args(args)
    config = (args.config or site.config).absolute()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    problems, warnings = review(site, config)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            f"{len(problems)} problem(s) with {config}: fix them before starting the hub",
            file=sys.stderr,
        )
        return 1
    above = f" ({len(warnings)} warning(s) above)" if warnings else ""
    print(f"{config}: no problem found{above}")
    return 0
