"""The culler's warnings by e-mail (issue 35, item 2; docs/culler.md, "Warnings by
e-mail"): the ``mail_*`` settings of ``GPUIdleCuller`` and one round's sending.

Off by default. When a site turns it on, each warning the culler issues (a server that
will be stopped ``warn_before`` from now if it stays idle) is mailed to its user once,
at the end of the round that issued it: once per idle stretch of a server start (its
``idle_since``; a suspend the hub refused, warned again as a stop, is mailed again),
remembered in the culler's state file, so that a warning issued again for the same
stretch (after a restart of the culler, or a blip of missing data) is not mailed
again. The words are
:func:`~jupyterhub_gpu.core.culling.mail.warning_mail_words`, the message
:mod:`~jupyterhub_gpu.wire.cull_mail`, the sending :mod:`~jupyterhub_gpu.edges.mail` (in
a thread: ``smtplib`` blocks). A mail that could not be sent is not sent again: a dead
SMTP server is one warning in the log per round, with what to fix, and the warnings on
the hub's pages and the culls go on as without mail.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from email.utils import make_msgid
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from traitlets import Bool, Callable, Enum, Float, HasTraits, Int, Unicode, Union, default, validate

from jupyterhub_gpu.core.culling.idleness import Decision
from jupyterhub_gpu.core.culling.mail import (
    PUBLIC_HUB_URL_ENV,
    TIMEZONE_ENV,
    address_of,
    check_address_template,
    check_hub_url,
    check_sender,
    clean,
    home_link,
    valid_address,
    warning_mail_words,
)
from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.edges.mail import (
    DEFAULT_PORTS,
    SECURITY,
    MailReport,
    SmtpSettings,
    read_password,
    send_mails,
)
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.cull_mail import OutgoingMail, encode_warning_mail


def _stretch(warning: CullWarning) -> str:
    """What one mail covers: a server's idle stretch (its ``idle_since``), and whether it
    was to be suspended or stopped (a suspend the hub refused is warned, and mailed,
    again as a stop)."""
    return warning.idle_since.isoformat() + (" suspend" if warning.suspend else "")


class WarningMail(HasTraits):
    """The ``mail_*`` settings of :class:`~.app.GPUIdleCuller` and their sending."""

    if TYPE_CHECKING:
        log: Any
        dry_run: bool
        warnings_file: str
        # "user/server@started" -> the idle_since (ISO) of the warning last mailed
        _mailed: dict[str, str]

        def _warn_once(self, key: str, message: str) -> None: ...

    mail_warnings = Bool(
        False,
        help="""Mail each warning before an idle cull to the server's user as well (once
        per warning, at the round that issues it): which server, when it will be stopped
        (in ``mail_timezone``), what is lost, and the hub's page with "I'm still here".
        Needs ``mail_smtp_host``, ``mail_from``, ``mail_address`` and ``mail_hub_url``.
        Default: off.""",
    ).tag(config=True)
    mail_smtp_host = Unicode(
        "", help="The SMTP server the mails go through, e.g. 'smtp.lab.example'."
    ).tag(config=True)
    mail_smtp_port = Int(
        0, help="Its port; 0 (the default): 587 for starttls, 465 for tls, 25 for none."
    ).tag(config=True)
    mail_security = Enum(
        list(SECURITY),
        default_value="starttls",
        help="""``starttls`` (the default: plain connection, then STARTTLS, refused if
        the server does not offer it), ``tls`` (TLS from the start, port 465) or ``none``
        (a relay on the local network; no login then).""",
    ).tag(config=True)
    mail_ca_cert = Unicode(
        "", help="CA bundle (PEM) the SMTP server's certificate must chain to; '': the system's."
    ).tag(config=True)
    mail_username = Unicode("", help="The SMTP login's user name; '' (the default): no login.").tag(
        config=True
    )
    mail_password_file = Unicode(
        "",
        help="""A file whose first line is the SMTP login's password (mode 0600, readable
        by the culler); read at each round that mails, never logged.""",
    ).tag(config=True)
    mail_from = Unicode(
        "",
        help="The sender: 'gpu-hub@lab.example' or 'GPU hub <gpu-hub@lab.example>'.",
    ).tag(config=True)
    mail_address = Union(
        [Callable(), Unicode()],
        default_value="",
        help="""Where a user's mail goes: a template with ``{username}``, e.g.
        '{username}@lab.example', or a callable that gets the hub's user model (name,
        groups) and returns her address or None (it may be async; e.g. a look-up of the
        LDAP ``mail`` attribute). An address that is not a plain ``local@domain`` (a name
        with spaces, CR/LF or non-ASCII) gets no mail, with one log line.""",
    ).tag(config=True)
    mail_hub_url = Unicode(
        help="""The hub's public URL, e.g. 'https://hub.lab.example' (with its
        base_url): the mail links to its /hub/home, where the warning and "I'm still
        here" show after the user logs in. No credential is ever in the link. Default:
        $JUPYTERHUB_PUBLIC_HUB_URL without its /hub/ (``configure_culler`` sets it from
        ``JupyterHub.public_url``).""",
    ).tag(config=True)
    mail_timezone = Unicode(
        help="""The time zone of the clock time in the mail (an IANA name such as
        'Europe/Paris'). Default: $JUPYTERHUB_GPU_TIMEZONE (``configure_culler`` sets it
        from the queue's ``queue_policy`` ``timezone``), else UTC.""",
    ).tag(config=True)
    mail_timeout = Float(
        10.0, help="Seconds the SMTP server has to answer each step of a round's sending."
    ).tag(config=True)

    @default("mail_hub_url")
    def _mail_hub_url(self) -> str:
        return os.environ.get(PUBLIC_HUB_URL_ENV, "").rstrip("/").removesuffix("/hub")

    @default("mail_timezone")
    def _mail_timezone(self) -> str:
        return os.environ.get(TIMEZONE_ENV, "") or "UTC"

    @validate("mail_address")
    def _check_address(self, proposal: Any) -> Any:
        value = proposal["value"]
        return value if callable(value) or not value else check_address_template(value)

    @validate("mail_from")
    def _check_from(self, proposal: Any) -> str:
        value = str(proposal["value"])
        if value:
            check_sender(value)
        return value

    @validate("mail_hub_url")
    def _check_hub_url(self, proposal: Any) -> str:
        value = str(proposal["value"])
        return check_hub_url(value) if value else value

    @validate("mail_timezone")
    def _check_timezone(self, proposal: Any) -> str:
        self._zone_named(str(proposal["value"]))
        return str(proposal["value"])

    @staticmethod
    def _zone_named(name: str) -> tzinfo:
        try:
            return ZoneInfo(name.strip())
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"GPUIdleCuller.mail_timezone: unknown time zone {name!r}; use an IANA name "
                "such as 'Europe/Paris', 'America/New_York' or 'UTC'"
            ) from None

    def smtp_settings(self) -> SmtpSettings:
        port = self.mail_smtp_port or DEFAULT_PORTS[self.mail_security]
        return SmtpSettings(
            host=self.mail_smtp_host,
            port=port,
            security=self.mail_security,
            timeout=self.mail_timeout,
            username=self.mail_username,
            password_file=self.mail_password_file,
            ca_cert=self.mail_ca_cert,
        )

    def check_mail_config(self) -> None:
        """Refuse to start with mail on but not usable (one sentence naming the setting)."""
        if not self.mail_warnings:
            return
        missing = [
            name
            for name in ("mail_smtp_host", "mail_from", "mail_address", "mail_hub_url")
            if not getattr(self, name)
        ]
        if missing:
            raise ConfigError(
                f"GPUIdleCuller.mail_warnings is on but {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (docs/culler.md)"
            )
        if not 0 <= self.mail_smtp_port < 65536:
            raise ConfigError(
                f"GPUIdleCuller.mail_smtp_port must be 0-65535, not {self.mail_smtp_port}"
            )
        if self.mail_timeout <= 0:
            raise ConfigError("GPUIdleCuller.mail_timeout must be > 0")
        if bool(self.mail_username) != bool(self.mail_password_file):
            raise ConfigError(
                "GPUIdleCuller.mail_username and mail_password_file go together: set both "
                "for a login, or neither"
            )
        if self.mail_username and self.mail_security == "none":
            raise ConfigError(
                "GPUIdleCuller.mail_security is 'none': a login would send its password in "
                "clear; use 'starttls' or 'tls'"
            )
        if self.mail_password_file:
            read_password(self.mail_password_file)  # readable now, or say so at start
        if self.mail_ca_cert and not os.access(self.mail_ca_cert, os.R_OK):
            raise ConfigError(f"GPUIdleCuller.mail_ca_cert: {self.mail_ca_cert} can't be read")
        if not self.warnings_file:
            self.log.warning(
                "Warnings are mailed, but warnings_file is not set: the hub's pages show no "
                "warning, so the mails offer no I'm still here (configure_culler sets it)"
            )
        self.log.info(
            "Warnings are mailed through %s (%s) from %s",
            self.smtp_settings().where,
            self.mail_security,
            self.mail_from,
        )

    async def _address(self, user: Mapping[str, Any]) -> str | None:
        """The user's address, or None (logged once per user): not a plain address, or a
        callable that gave none or failed."""
        name = str(user.get("name", ""))
        rule: Any = self.mail_address
        if callable(rule):
            try:
                found = rule(user)
                if inspect.isawaitable(found):
                    found = await found
            except Exception as e:  # the site's code: one line, and no mail
                self._warn_once(f"mail-address:{name}", f"No mail to {clean(name)!r}: "
                                f"mail_address failed ({e.__class__.__name__})")  # fmt: skip
                return None
            address = found if isinstance(found, str) and valid_address(found) else None
        else:
            address = address_of(str(rule), name)
        if address is None:
            self._warn_once(
                f"mail-address:{name}",
                f"No mail to {clean(name)!r}: no plain address (local@domain) for that "
                "user; check GPUIdleCuller.mail_address",
            )
        return address

    async def mail_round(
        self,
        users: Sequence[Mapping[str, Any]],
        decisions: Mapping[str, Decision],
        new: Mapping[str, CullWarning],
        now: datetime,
    ) -> MailReport:
        """Mail ``new``, the warnings this round issued by holder (``alice/``,
        ``alice/train``), of the servers it kept; nothing when mail is off."""
        if not self.mail_warnings:
            return MailReport()
        found = []
        live: dict[str, str] = {}
        for user in users:
            for name, server in sorted((user.get("servers") or {}).items()):
                key = f"{user['name']}/{name}@{server.get('started')}"
                full = f"{user['name']}/{name}" if name else str(user["name"])
                if full not in decisions or decisions[full].cull:
                    continue
                if key in self._mailed:
                    live[key] = self._mailed[key]
                warning = new.get(f"{user['name']}/{name}")
                if warning is None or live.get(key) == _stretch(warning):
                    continue  # no new warning, or this idle stretch's was mailed already
                live[key] = _stretch(warning)  # mailed once: a failed send is not retried
                state = server.get("state")
                uuids = state.get("gpu_uuids") if isinstance(state, Mapping) else None
                count = len(uuids) if isinstance(uuids, list) else 0
                found.append((user, str(name), count, warning))
        self._mailed = live
        if not found:
            return MailReport()
        try:
            return await self.mail_warnings_now(found, now)
        except (ValueError, ConfigError) as e:  # settings checked at start: not expected
            self.log.warning("Warning mails not sent: %s", e)
            return MailReport()

    async def mail_warnings_now(
        self,
        new: Sequence[tuple[Mapping[str, Any], str, int, CullWarning]],
        now: datetime,
    ) -> MailReport:
        """Mail this round's new warnings, ``(user model, server name, GPU count,
        warning)`` each, once: one connection, no retry; a failure is one log line."""
        if not self.mail_warnings or not new:
            return MailReport()
        sender = check_sender(self.mail_from)
        zone = self._zone_named(self.mail_timezone)
        link = home_link(self.mail_hub_url)
        postponable_here = bool(self.warnings_file)  # the hub shows the button
        mails: list[OutgoingMail] = []
        for user, server, gpu_count, warning in new:
            address = await self._address(user)
            if address is None:
                continue
            words = warning_mail_words(
                str(user.get("name", "")),
                server,
                gpu_count,
                warning,
                now,
                zone,
                link,
                warning.postponable and postponable_here,
            )
            mails.append(
                encode_warning_mail(
                    words,
                    sender=sender,
                    recipient=address,
                    date=now,
                    message_id=make_msgid("cull-warning", domain=sender[1].split("@")[1]),
                )
            )
        if self.dry_run:
            for m in mails:
                self.log.info("Would mail the warning to %s (dry run)", m.recipient)
            return MailReport()
        report = await asyncio.to_thread(send_mails, self.smtp_settings(), mails)
        if report.failure:
            self.log.warning(
                "%d warning mail(s) not sent (not retried; the hub's pages still warn): %s",
                len(mails) - report.sent,
                report.failure,
            )
        if report.refused:
            self.log.warning(
                "The SMTP server refused %d warning mail(s), to %s",
                len(report.refused),
                ", ".join(report.refused[:5]),
            )
        if report.sent:
            self.log.info("Mailed %d warning(s)", report.sent)
        return report
