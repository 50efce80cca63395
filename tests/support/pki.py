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


def valid_until(cert_pem: bytes, ca_key_pem: bytes, days_left: float) -> bytes:
    """``cert_pem`` signed again by its CA's key ``ca_key_pem`` (``cryptography``): the
    same subject, issuer, key and extensions, valid from 400 days ago until ``days_left``
    days from now (negative: expired that long ago)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    old = x509.load_pem_x509_certificate(cert_pem)
    signer = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder().subject_name(old.subject).issuer_name(old.issuer)
        .public_key(old.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=400))
        .not_valid_after(now + dt.timedelta(days=days_left))
    )  # fmt: skip
    for ext in old.extensions:
        builder = builder.add_extension(ext.value, ext.critical)
    return builder.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
