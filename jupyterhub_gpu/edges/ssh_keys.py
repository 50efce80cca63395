"""The SSH gateway's files: its host key (made once, kept 0600 in the site's state
folder) and a user's ``~/.ssh/authorized_keys`` on the shared home, read as sshd's
StrictModes would (the decision: :func:`jupyterhub_gpu.core.ssh.access.strict_modes`).

Both the gateway service and ``jupyterhub-gpu ssh fingerprint`` use this module."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from jupyterhub_gpu.core.ssh.access import MAX_AUTHORIZED_KEYS_BYTES, PathFacts, strict_modes
from jupyterhub_gpu.errors import KeysRefused as KeysRefused

HOST_KEY_ALGORITHM = "ssh-ed25519"


def load_or_make_host_key(path: Path) -> asyncssh.SSHKey:
    """The host key at ``path``, made first if there is none (created 0600 from the start,
    with ``O_EXCL``: two gateways starting together never both write it). A key file that
    others may read is refused: its secrecy is what the fingerprint vouches for."""
    try:
        return read_host_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = asyncssh.generate_private_key(HOST_KEY_ALGORITHM, comment="jupyterhub-gpu ssh gateway")
    data = key.export_private_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_host_key(path)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return key


def read_host_key(path: Path) -> asyncssh.SSHKey:
    """The host key at ``path`` (FileNotFoundError without one); refused when it is not a
    regular file readable by its owner only."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise PermissionError(
                f"{path}: the SSH host key must be a regular file with mode 0600 "
                f"(it is {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
            )
        return asyncssh.import_private_key(f.read(64 * 1024))


def fingerprint(key: asyncssh.SSHKey) -> str:
    """``SHA256:...``, as ``ssh`` shows it when it first meets the host."""
    return str(key.get_fingerprint("sha256"))


def _facts(name: str, fd: int) -> PathFacts:
    st = os.fstat(fd)
    return PathFacts(name=name, uid=st.st_uid, mode=st.st_mode, size=st.st_size)


def read_authorized_keys(home: Path, uid: int, max_bytes: int = MAX_AUTHORIZED_KEYS_BYTES) -> str:
    """The text of ``home/.ssh/authorized_keys``, or :class:`KeysRefused` saying why not.

    Each step is opened without following a symlink (``O_NOFOLLOW``, relative to the
    folder opened before), and the StrictModes checks are made on what ``fstat`` says of
    the opened files, so nothing can be swapped between the check and the read. A missing
    file is ``KeysRefused`` too (no key)."""
    flags_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(home, flags_dir))
            fds.append(os.open(".ssh", flags_dir, dir_fd=fds[-1]))
            fds.append(
                os.open(
                    "authorized_keys", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1]
                )
            )
        except FileNotFoundError:
            raise KeysRefused(f"{home}/.ssh/authorized_keys does not exist") from None
        except OSError as e:  # ELOOP: a symlink; ENOTDIR; EACCES
            raise KeysRefused(
                f"{home}/.ssh/authorized_keys can't be opened: {e.strerror}"
            ) from None
        home_f, ssh_f, keys_f = (
            _facts(str(home), fds[0]),
            _facts(f"{home}/.ssh", fds[1]),
            _facts(f"{home}/.ssh/authorized_keys", fds[2]),
        )
        why = strict_modes(uid, home_f, ssh_f, keys_f, max_bytes)
        if why:
            raise KeysRefused(why)
        data = os.read(fds[2], max_bytes + 1)
        if len(data) > max_bytes:
            raise KeysRefused(f"{home}/.ssh/authorized_keys is larger than {max_bytes} bytes")
        return data.decode("utf-8", errors="replace")
    finally:
        for fd in fds:
            os.close(fd)


def parse_authorized_keys(text: str) -> asyncssh.SSHAuthorizedKeys:
    """asyncssh's reading of the file, whose options (``from=``, ``command=``,
    ``no-pty``...) asyncssh then applies. A line it can't read is skipped, as sshd does;
    a file with no key at all is :class:`KeysRefused`."""
    good = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            asyncssh.import_authorized_keys(line)
        except (ValueError, asyncssh.KeyImportError):
            continue
        good.append(line)
    if not good:
        raise KeysRefused("authorized_keys holds no key the gateway can read")
    return asyncssh.import_authorized_keys("\n".join(good) + "\n")


def ldap_key_lines(values: Sequence[str]) -> tuple[list[str], list[str]]:
    """The user's keys from LDAP (``sshPublicKey`` values, bounded by the hub) as
    authorized_keys lines: each read by asyncssh's key parser and written back in
    OpenSSH's form, so a value carries a key and nothing else (no options). Returns (the
    lines, why each other value was skipped: "value N: not a public key ...")."""
    lines: list[str] = []
    skipped: list[str] = []
    for i, value in enumerate(values, 1):
        try:
            key = asyncssh.import_public_key(value)
        except (ValueError, asyncssh.KeyImportError) as e:
            skipped.append(f"value {i}: not a public key ({str(e)[:80]})")
            continue
        lines.append(key.export_public_key("openssh").decode("ascii").strip())
    return lines, skipped


__all__ = [
    "KeysRefused",
    "fingerprint",
    "ldap_key_lines",
    "load_or_make_host_key",
    "parse_authorized_keys",
    "read_authorized_keys",
    "read_host_key",
]
