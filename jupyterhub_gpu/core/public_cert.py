"""``check-config``'s judgement of the hub's public HTTPS certificate (pure).

Over plain facts that cli/check.py reads with ``cryptography`` (:class:`PublicCertFacts`):
a certificate that has expired (or is not valid yet), that cannot be read, or whose key
is not its own is a problem (browsers refuse the logins; the proxy cannot start); one
that expires within :data:`WARN_WITHIN_DAYS` days is a warning, which does not stop the
hub. Each line names the file, when (local time) and what to do: ``certs renew public``
for the certificate the site's CA made, or replacing the site's own file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo

from jupyterhub_gpu.core.words import UTC, duration, moment

#: a public certificate that expires within this many days is a warning of check-config
WARN_WITHIN_DAYS = 14
RESTART = "then restart the hub (systemctl restart jupyterhub-gpu-hub)"


@dataclass(frozen=True)
class PublicCertFacts:
    """What the hub's public certificate and key files hold."""

    cert: str  # JupyterHub.ssl_cert
    key: str  # JupyterHub.ssl_key
    not_before: float | None = None  # epoch seconds; None when the certificate was unread
    not_after: float | None = None
    cert_error: str = ""  # why the certificate could not be read
    key_matches: bool | None = None  # None when the key could not be read
    key_error: str = ""  # why the key could not be read
    renew: str = ""  # the command that renews it ('' for the site's own certificate)


@dataclass(frozen=True)
class PublicCertLines:
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _fix(f: PublicCertFacts) -> str:
    if f.renew:
        return f"renew it: {f.renew}, {RESTART}"
    return (
        f"replace {f.cert} and {f.key} with a current certificate and its key from where "
        f"the site's certificate came, {RESTART}"
    )


def public_cert_lines(f: PublicCertFacts, now: float, tz: tzinfo = UTC) -> PublicCertLines:
    """The problems and warnings of the hub's public certificate, one sentence each."""
    problems: list[str] = []
    warnings: list[str] = []
    start, end = f.not_before, f.not_after
    if start is None or end is None:
        problems.append(
            f"{f.cert} (JupyterHub.ssl_cert) cannot be read as a certificate "
            f"({f.cert_error or 'no PEM certificate'}): {_fix(f)}."
        )
    elif end <= now:
        problems.append(
            f"{f.cert} (JupyterHub.ssl_cert) expired on {moment(end, tz)} "
            f"({duration(now - end)} ago), so browsers refuse the hub's logins: {_fix(f)}."
        )
    elif start > now:
        problems.append(
            f"{f.cert} (JupyterHub.ssl_cert) is valid only from {moment(start, tz)}: "
            f"check this machine's clock, or {_fix(f)}."
        )
    elif end - now <= WARN_WITHIN_DAYS * 86400:
        warnings.append(
            f"{f.cert} (JupyterHub.ssl_cert) expires on {moment(end, tz)}, in "
            f"{duration(end - now)}: {_fix(f)}."
        )
    if f.key_matches is None:
        problems.append(
            f"{f.key} (JupyterHub.ssl_key) cannot be read as a private key "
            f"({f.key_error or 'no PEM key'}), so the hub's proxy cannot start: give the "
            "certificate's key, without a password."
        )
    elif not f.key_matches:
        fix = (
            f"renew the certificate for the key there: {f.renew}, {RESTART}"
            if f.renew
            else f"give the key that goes with {f.cert}, {RESTART}"
        )
        problems.append(
            f"{f.key} (JupyterHub.ssl_key) is not the key of {f.cert}, so the hub's proxy "
            f"cannot start: {fix}."
        )
    return PublicCertLines(tuple(problems), tuple(warnings))
