"""Sending mail through the site's SMTP server (the standard library's ``smtplib``).

:func:`send_mails` sends one round's messages over one connection, each message once:
no retry, so a dead or refusing server costs one attempt per round, and the caller logs
the one sentence of :class:`MailReport` that says what to fix. It blocks (run it in a
thread). The login's password is read from a file at each round (:func:`read_password`)
and is never logged nor put in a message: failures name the host, the port, the user
name and the server's answer.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jupyterhub_gpu.errors import ConfigError, _MailLoginFailed
from jupyterhub_gpu.wire.cull_mail import OutgoingMail

#: Security modes: STARTTLS on the submission port, TLS from the start, or none.
SECURITY = ("starttls", "tls", "none")
#: Their usual ports (``mail_smtp_port`` 0).
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}
#: Bytes of a password file read at most.
MAX_PASSWORD = 4096


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    security: str  # one of SECURITY
    timeout: float
    username: str = ""
    password_file: str = field(default="", repr=False)
    ca_cert: str = ""  # PEM bundle the server's certificate must chain to; '': the system's

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class MailReport:
    """What one round's sending did: ``sent`` messages, the ``refused`` recipients, and
    ``failure``, one sentence with what to fix when the server could not be used ('')."""

    sent: int = 0
    refused: tuple[str, ...] = ()
    failure: str = ""


def read_password(path: str) -> str:
    """The SMTP password: the file's first line (ConfigError: unreadable, empty or too
    long; the message names the file, never its content)."""
    where = f"GPUIdleCuller.mail_password_file {path}"
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_PASSWORD + 1)
    except OSError as e:
        raise ConfigError(f"{where} can't be read ({e.strerror or e})") from None
    if len(raw) > MAX_PASSWORD:
        raise ConfigError(f"{where} is longer than {MAX_PASSWORD} bytes: not a password")
    try:
        password = raw.decode("utf-8").splitlines()[0] if raw.strip() else ""
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None
    if not password:
        raise ConfigError(f"{where} is empty: write the password on its first line")
    if not password.isascii():
        raise ConfigError(f"{where}: the password is not ASCII, which SMTP's login can't send")
    return password


def _connect(s: SmtpSettings) -> smtplib.SMTP:
    context = ssl.create_default_context(cafile=s.ca_cert or None)
    smtp: smtplib.SMTP
    if s.security == "tls":
        smtp = smtplib.SMTP_SSL(s.host, s.port, timeout=s.timeout, context=context)
    else:
        smtp = smtplib.SMTP(s.host, s.port, timeout=s.timeout)
    try:
        if s.security == "starttls":
            smtp.starttls(context=context)
        if s.username:
            password = read_password(s.password_file)
            try:
                smtp.login(s.username, password)
            except (smtplib.SMTPAuthenticationError, smtplib.SMTPServerDisconnected):
                raise _MailLoginFailed() from None
    except BaseException:
        smtp.close()
        raise
    return smtp


def _why(e: BaseException, s: SmtpSettings) -> str:
    """One sentence saying what failed and which setting to look at (no secret)."""
    settings = "GPUIdleCuller.mail_smtp_host and mail_smtp_port"
    if isinstance(e, ConfigError):
        return str(e)
    if isinstance(e, _MailLoginFailed):
        return (
            f"the SMTP server {s.where} refused the login of {s.username!r}: check "
            "mail_username and mail_password_file"
        )
    if isinstance(e, smtplib.SMTPNotSupportedError):
        return (
            f"the SMTP server {s.where} offers no STARTTLS or no login: check "
            "mail_security ('tls' on port 465, 'starttls' on 587) and mail_username"
        )
    if isinstance(e, ssl.SSLError | ssl.CertificateError):
        return (
            f"TLS with the SMTP server {s.where} failed ({e.__class__.__name__}: "
            f"{getattr(e, 'reason', None) or e}): check mail_security and mail_ca_cert"
        )
    if isinstance(e, smtplib.SMTPSenderRefused):
        return f"the SMTP server {s.where} refused the sender ({e.smtp_code}): check mail_from"
    if isinstance(e, smtplib.SMTPResponseException):
        return f"the SMTP server {s.where} answered {e.smtp_code}: check {settings}"
    if isinstance(e, TimeoutError):
        return f"no answer from the SMTP server {s.where} within {s.timeout:g} s: check {settings}"
    if isinstance(e, smtplib.SMTPServerDisconnected):
        return (
            f"the SMTP server {s.where} closed the connection: check {settings} and mail_security"
        )
    if isinstance(e, OSError):
        return f"no SMTP server at {s.where} ({e.strerror or e}): check {settings}"
    return f"sending through {s.where} failed ({e.__class__.__name__}): check {settings}"


def send_mails(settings: SmtpSettings, mails: Sequence[OutgoingMail]) -> MailReport:
    """Send ``mails`` over one connection, each once; never raises for the server's or
    the network's failures (they are the report's ``failure``)."""
    if not mails:
        return MailReport()
    sent, refused = 0, []
    try:
        smtp = _connect(settings)
    except (OSError, smtplib.SMTPException, ConfigError, _MailLoginFailed) as e:
        return MailReport(failure=_why(e, settings))
    try:
        for mail in mails:
            try:
                smtp.sendmail(mail.sender, [mail.recipient], mail.data)
                sent += 1
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError):
                refused.append(mail.recipient)
    except (OSError, smtplib.SMTPException) as e:
        return MailReport(sent, tuple(refused), _why(e, settings))
    finally:
        try:
            smtp.quit()
        except (OSError, smtplib.SMTPException):
            smtp.close()
    return MailReport(sent, tuple(refused))
