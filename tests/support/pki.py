"""A throw-away test PKI made with ``openssl``: CAs and server certificates for TLS tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (key, certificate)."""
    key, pem = folder / f"{name}.key", folder / f"{name}.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", key,
            "-out", pem, "-subj", f"/CN={name}")  # fmt: skip
    return key, pem


def issue(folder: Path, ca: tuple[Path, Path], name: str, san: str) -> tuple[Path, Path]:
    """A server certificate for ``san`` (e.g. ``IP:127.0.0.1``) signed by ``ca``."""
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    ext = folder / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
            "-subj", f"/CN={name}")  # fmt: skip
    openssl("x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0], "-CAcreateserial",
            "-out", cert, "-days", "2", "-extfile", ext)  # fmt: skip
    return cert, key
