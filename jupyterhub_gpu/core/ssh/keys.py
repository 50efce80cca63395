"""Keys from the site's LDAP (the openssh-lpk schema's ``sshPublicKey``), bounded before
they leave the hub: at most ``max_count`` values, each one line of at most ``max_bytes``
(a value over a bound is skipped with its reason, the rest kept). Which values are keys
at all is asyncssh's to say, in the gateway
(:func:`jupyterhub_gpu.edges.ssh_keys.ldap_key_lines`)."""

from __future__ import annotations

from collections.abc import Iterable

#: at most this many ``sshPublicKey`` values of one user are used
MAX_LDAP_KEYS = 32
#: a value longer than this is not a key anyone uses (an RSA-16384 key is ~2.8 KB)
MAX_LDAP_KEY_BYTES = 8 * 1024


def bounded_key_values(
    values: Iterable[object],
    max_count: int = MAX_LDAP_KEYS,
    max_bytes: int = MAX_LDAP_KEY_BYTES,
) -> tuple[list[str], list[str]]:
    """(the values kept, as text; why each other one was skipped). A value may be ``str``
    or ``bytes`` (an octet string) ; surrounding blanks are dropped, an empty one ignored."""
    kept: list[str] = []
    skipped: list[str] = []
    for i, value in enumerate(values, 1):
        if isinstance(value, bytes | bytearray):
            raw = bytes(value)
        elif isinstance(value, str):
            raw = value.encode("utf-8", "surrogateescape")
        else:
            skipped.append(f"value {i}: not text")
            continue
        if len(raw) > max_bytes:
            skipped.append(f"value {i}: longer than {max_bytes} bytes")
            continue
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            skipped.append(f"value {i}: not UTF-8 text")
            continue
        if not text:
            continue
        if "\n" in text or "\r" in text or "\0" in text:
            skipped.append(f"value {i}: more than one line")
            continue
        if len(kept) >= max_count:
            skipped.append(f"value {i}: more than {max_count} keys")
            continue
        kept.append(text)
    return kept, skipped


__all__ = ["MAX_LDAP_KEYS", "MAX_LDAP_KEY_BYTES", "bounded_key_values"]
