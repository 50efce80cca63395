"""check-config on the hub's public HTTPS certificate: expired (or not valid yet) or not
its key's -> a problem that says what to do (``certs renew public``, or replacing the
site's own file), expiring within 14 days -> a warning that does not fail the check.
The decision (core/public_cert.py) over plain facts, then real certificates made with
``cryptography`` on a site laid out in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from jupyterhub_gpu import cli
from jupyterhub_gpu.cli import certs, check
from jupyterhub_gpu.cli.layout import Site
from jupyterhub_gpu.core.public_cert import WARN_WITHIN_DAYS, PublicCertFacts, public_cert_lines
from tests.support.pki import valid_until

pytestmark = pytest.mark.unit
HUB_IP = "10.0.0.1"
DAY = 86400.0
NOW = 1_800_000_000.0  # 2027-01-15 08:00 UTC
RENEW = "jupyterhub-gpu certs renew public --etc /etc/jupyterhub-gpu"


def facts(days_left: float, **kw: object) -> PublicCertFacts:
    base = {"not_before": NOW - 400 * DAY, "not_after": NOW + days_left * DAY,
            "key_matches": True, "renew": RENEW}  # fmt: skip
    return PublicCertFacts("/etc/hub.pem", "/etc/hub.key", **{**base, **kw})  # type: ignore[arg-type]


# ------------------------------------------------------------------ the decision
@pytest.mark.parametrize(
    ("f", "problem", "warning"),
    [
        (facts(90), "", ""),
        (facts(WARN_WITHIN_DAYS + 0.01), "", ""),
        (facts(WARN_WITHIN_DAYS), "", "/etc/hub.pem (JupyterHub.ssl_cert) expires on "
         "2027-01-29 08:00 UTC, in 14 days: renew it: " + RENEW + ", then restart the hub"),
        (facts(0.5), "", "expires on 2027-01-15 20:00 UTC, in 12 h: renew it"),
        (facts(0), "expired on 2027-01-15 08:00 UTC (0 s ago), so browsers refuse", ""),
        (facts(-3.5), "/etc/hub.pem (JupyterHub.ssl_cert) expired on 2027-01-11 20:00 UTC "
         "(3 days 12 h ago), so browsers refuse the hub's logins: renew it: " + RENEW +
         ", then restart the hub (systemctl restart jupyterhub-gpu-hub).", ""),
        (facts(-1, renew=""), "expired on 2027-01-14 08:00 UTC (24 h ago), so browsers "
         "refuse the hub's logins: replace /etc/hub.pem and /etc/hub.key with a current "
         "certificate and its key from where the site's certificate came, then restart", ""),
        (facts(30, not_before=NOW + DAY), "is valid only from 2027-01-16 08:00 UTC: check "
         "this machine's clock", ""),
        (facts(30, not_before=None, not_after=None, cert_error="no PEM certificate"),
         "/etc/hub.pem (JupyterHub.ssl_cert) cannot be read as a certificate (no PEM "
         "certificate): renew it", ""),
        (facts(90, key_matches=False), "/etc/hub.key (JupyterHub.ssl_key) is not the key of "
         "/etc/hub.pem, so the hub's proxy cannot start: renew the certificate for the key "
         "there: " + RENEW, ""),
        (facts(90, key_matches=False, renew=""), "is not the key of /etc/hub.pem, so the "
         "hub's proxy cannot start: give the key that goes with /etc/hub.pem", ""),
        (facts(90, key_matches=None, key_error="it is protected by a password"),
         "/etc/hub.key (JupyterHub.ssl_key) cannot be read as a private key (it is "
         "protected by a password)", ""),
    ],
)  # fmt: skip
def test_expired_expiring_and_mismatched_certificates_are_said(
    f: PublicCertFacts, problem: str, warning: str
) -> None:
    lines = public_cert_lines(f, NOW)
    assert [problem in p for p in lines.problems] == ([True] if problem else []), lines
    assert [warning in w for w in lines.warnings] == ([True] if warning else []), lines


def test_an_expiring_certificate_with_another_key_is_both_said() -> None:
    lines = public_cert_lines(facts(3, key_matches=False), NOW)
    assert len(lines.problems) == 1 and "is not the key of" in lines.problems[0]
    assert len(lines.warnings) == 1 and "in 3 days" in lines.warnings[0]


def test_times_are_the_local_zone_s() -> None:
    from zoneinfo import ZoneInfo

    (said,) = public_cert_lines(facts(-1), NOW, ZoneInfo("Europe/Berlin")).problems
    assert "expired on 2027-01-14 09:00 CET" in said


# ------------------------------------------------------- real certificates, real site
@pytest.fixture
def site(tmp_path: Path) -> Site:
    s = Site(etc=tmp_path / "etc" / "jupyterhub-gpu", state=tmp_path / "state")
    assert cli.main(["site", "init", "--etc", str(s.etc), "--state", str(s.state), "--hub-ip",
                     HUB_IP, "--node", "gpu-a=127.0.0.1", "--ldap-server",
                     "ldap.cs.uni.edu"]) == 0  # fmt: skip
    for argv in (["ca"], ["hub"], ["public", "--address", HUB_IP],
                 ["node", "gpu-a", "--address", "127.0.0.1"]):  # fmt: skip
        assert cli.main(["certs", "--etc", str(s.etc), *argv]) == 0
    return s


def reissue(s: Site, days_left: float) -> None:
    """The hub's public certificate issued again by the site's CA, for its key, valid
    until ``days_left`` days from now (negative: expired that long ago)."""
    pem = valid_until(s.public_cert.read_bytes(), s.ca_key.read_bytes(), days_left)
    s.public_cert.write_bytes(pem)


def run(s: Site, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["check-config", "--etc", str(s.etc), "--state", str(s.state)])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_expired_site_certificate_fails_and_its_renewal_mends_it(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check.review(site, site.config) == ([], [])
    reissue(site, -1.5)
    (said,) = check.check(site, site.config)
    assert said.startswith(f"{site.public_cert} (JupyterHub.ssl_cert) expired on "), said
    assert "(36 h ago), so browsers refuse the hub's logins: renew it: " in said
    fix = f"jupyterhub-gpu certs renew public --etc {site.etc}"
    assert fix in said
    code, _, err = run(site, capsys)
    assert code == 1 and said in err
    assert cli.main(fix.split()[1:]) == 0  # what the line says to do
    capsys.readouterr()
    assert check.review(site, site.config) == ([], [])


def test_a_certificate_expiring_within_14_days_warns_without_failing(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    reissue(site, 10)
    problems, (warning,) = check.review(site, site.config)
    assert problems == []
    assert "expires on " in warning and ", in 9 days 23 h: renew it: " in warning, warning
    code, out, err = run(site, capsys)
    assert code == 0 and f"warning: {warning}" in err
    assert "no problem found (1 warning(s) above)" in out
    reissue(site, 15)
    assert check.review(site, site.config) == ([], [])


def test_a_key_that_is_not_the_certificate_s_fails_and_renewal_mends_it(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    site.public_key.write_bytes(certs._key_pem(other))
    (said,) = check.check(site, site.config)
    assert said == (
        f"{site.public_key} (JupyterHub.ssl_key) is not the key of {site.public_cert}, so "
        "the hub's proxy cannot start: renew the certificate for the key there: "
        f"jupyterhub-gpu certs renew public --etc {site.etc}, then restart the hub "
        "(systemctl restart jupyterhub-gpu-hub)."
    )
    assert cli.main(["certs", "--etc", str(site.etc), "renew", "public"]) == 0
    capsys.readouterr()
    assert check.review(site, site.config) == ([], [])


def test_the_site_s_own_certificate_is_replaced_not_renewed(
    site: Site, tmp_path: Path
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    cert, key = own / "hub.pem", own / "hub.key"
    cert.write_bytes(site.public_cert.read_bytes())
    key.write_bytes(site.public_key.read_bytes())
    key.chmod(0o600)
    text = site.config.read_text().replace(
        'str(ETC / "tls" / "public-cert.pem")', repr(str(cert))
    ).replace('str(ETC / "tls" / "public-key.pem")', repr(str(key)))
    assert repr(str(cert)) in text and repr(str(key)) in text
    site.config.write_text(text)
    assert check.review(site, site.config) == ([], [])
    reissue(site, -1)
    cert.write_bytes(site.public_cert.read_bytes())
    (said,) = check.check(site, site.config)
    assert f"{cert} (JupyterHub.ssl_cert) expired on " in said
    assert f"replace {cert} and {key} with a current certificate and its key" in said
    assert "certs renew" not in said


def test_a_missing_or_garbled_certificate_is_one_line(site: Site) -> None:
    site.public_cert.write_text("not a certificate\n")
    (said,) = check.check(site, site.config)
    assert "cannot be read as a certificate (no PEM certificate): renew it" in said
    site.public_cert.unlink()
    (said,) = check.check(site, site.config)
    assert "does not exist: make it: jupyterhub-gpu certs public" in said  # as before
