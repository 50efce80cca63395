"""The warning before a cull, by e-mail (issue 35, item 2): whose address, what the mail
says, and the admin's mail settings checked. Pure: plain data in, plain data out.

The culler mails a server's user once per warning (:class:`~.warning.CullWarning`) when
the site turns it on (``GPUIdleCuller.mail_warnings``, docs/culler.md). The mail says, in
the user's words, which server, when it will be stopped (a clock time in the site's time
zone), what is lost, and where to press "I'm still here": the hub's home page, where the
warning shows with its button. The link carries no credential: the user logs in to use
it, and the press goes through the hub's own API with her login.

Every part a user chose (her name, her server's name) is cleaned of control characters
and bounded before it reaches a header or the body (:func:`clean`), and an address is
used only if it is a plain ``local@domain`` (:func:`valid_address`): a name with CR/LF or
any other byte outside an address's alphabet gets no mail rather than an extra header.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
from datetime import datetime, tzinfo
from urllib.parse import urlsplit

from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.core.words import duration, gpus, zoned_clock
from jupyterhub_gpu.errors import ConfigError

#: Characters of a user's or a server's name shown in a mail, at most.
MAX_NAME_SHOWN = 64
#: An address's length at most (RFC 5321: a path of 256 with its brackets).
MAX_ADDRESS = 254
#: The one placeholder of ``mail_address``'s template.
FIELD = "username"
#: The hub's public URL of its /hub/ pages (JupyterHub's name for it, given to servers);
#: ``configure_culler`` sets it in the culler's environment from ``JupyterHub.public_url``.
PUBLIC_HUB_URL_ENV = "JUPYTERHUB_PUBLIC_HUB_URL"
#: The site's time zone (an IANA name), the queue's ``queue_policy`` ``timezone``;
#: ``configure_culler`` sets it in the culler's environment.
TIMEZONE_ENV = "JUPYTERHUB_GPU_TIMEZONE"

# RFC 5322's dot-atom: what a local part may hold unquoted (no quoted strings, no comments)
_ATEXT = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+")
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class MailWords:
    """What the user reads: a one-line subject and a plain-text body."""

    subject: str
    body: str


def clean(text: str, limit: int = MAX_NAME_SHOWN) -> str:
    """``text`` fit for a header or a line of a mail: every control, format or separator
    character but the plain space removed (CR, LF, tabs, escapes, bidi overrides), runs of
    spaces made one, at most ``limit`` characters (an ellipsis marks a cut)."""
    kept = "".join(c for c in text if c == " " or unicodedata.category(c)[0] not in "CZ")
    kept = " ".join(kept.split())
    return kept if len(kept) <= limit else kept[: limit - 1] + "…"


def valid_address(address: str) -> bool:
    """Whether ``address`` is a plain ASCII ``local@domain`` (a dot-atom local part of at
    most 64 characters, a domain of DNS labels), at most :data:`MAX_ADDRESS` long."""
    if len(address) > MAX_ADDRESS or address.count("@") != 1:
        return False
    local, domain = address.split("@")
    if not 0 < len(local) <= 64 or not all(_ATEXT.fullmatch(p) for p in local.split(".")):
        return False
    labels = domain.split(".")
    return len(domain) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def check_address_template(template: str) -> str:
    """``mail_address``'s template, e.g. ``{username}@lab.example``: its one field is
    ``{username}`` and what it makes of a plain name is an address; else ConfigError."""
    where = "GPUIdleCuller.mail_address"
    try:
        fields = [(f, s, c) for _, f, s, c in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ConfigError(f"{where}: {e}; write e.g. '{{username}}@lab.example'") from None
    if fields != [(FIELD, "", None)]:
        raise ConfigError(
            f"{where}: the template must hold {{{FIELD}}} once and no other field, "
            f"e.g. '{{username}}@lab.example'; got {template!r}"
        )
    if not valid_address(template.format(username="alice")):
        raise ConfigError(
            f"{where}: {template!r} does not make an address of a user name "
            "(e.g. '{username}@lab.example')"
        )
    return template


def address_of(template: str, username: str) -> str | None:
    """The address ``template`` makes of ``username``, or None when that is no plain
    address (a name with CR/LF, spaces, '@', non-ASCII: no mail rather than a bad one)."""
    if len(username) > MAX_ADDRESS:
        return None
    address = template.replace("{" + FIELD + "}", username)
    return address if valid_address(address) else None


def check_sender(sender: str) -> tuple[str, str]:
    """``mail_from`` as (display name, address): ``gpu-hub@lab.example`` or
    ``GPU hub <gpu-hub@lab.example>``; ConfigError for anything else."""
    where = "GPUIdleCuller.mail_from"
    match = re.fullmatch(r"\s*(?:(?P<name>[^<>\"]*?)\s*<(?P<a>[^<>]*)>|(?P<b>[^<>\s]+))\s*", sender)
    address = "" if match is None else (match["a"] or match["b"] or "")
    name = "" if match is None else (match["name"] or "")
    if match is None or not valid_address(address) or clean(name, 78) != name:
        raise ConfigError(
            f"{where}: {sender!r} is not an address such as 'gpu-hub@lab.example' or "
            "'GPU hub <gpu-hub@lab.example>'"
        )
    return name, address


def check_hub_url(url: str) -> str:
    """``mail_hub_url``: the hub's public ``http(s)://`` URL, with no user, password,
    query or fragment (the mail's link carries no credential); returned without its
    trailing slash. ConfigError otherwise."""
    where = "GPUIdleCuller.mail_hub_url"
    hint = "the hub's public URL, e.g. 'https://hub.lab.example' (with its base_url, if any)"
    try:
        parts = urlsplit(url)
        _ = parts.port  # a bad port raises here
    except ValueError:
        raise ConfigError(f"{where}: {url!r} is not a URL; set it to {hint}") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
        or clean(url, 2048) != url
        or " " in url
    ):
        raise ConfigError(f"{where}: {url!r} can't be a link in a mail; set it to {hint}")
    return url.rstrip("/")


def home_link(hub_url: str) -> str:
    """Where the user sees the warning and its "I'm still here": the hub's home page."""
    return f"{hub_url.rstrip('/')}/hub/home"


def warning_mail_words(
    user: str,
    server: str,
    gpu_count: int,
    warning: CullWarning,
    now: datetime,
    tz: tzinfo,
    link: str,
    postponable: bool,
) -> MailWords:
    """The mail of one warning: which server, when (``tz``'s clock), what is lost, and
    what to do (``link``: :func:`home_link`; ``postponable``: "I'm still here" is offered
    there, once per server start)."""
    name = clean(server)
    which = f"Your server '{name}'" if name else "Your server"
    at = warning.at.timestamp()
    when = zoned_clock(at, now.timestamp(), tz)
    idle = duration(max((now - warning.idle_since).total_seconds(), 0.0))
    holds = f" (it holds {gpus(gpu_count)})" if gpu_count > 0 else ""
    verb = "suspended" if warning.suspend else "stopped"
    subject = f"{which} will be {verb} at {when} if it stays idle"
    if postponable:
        act = (
            f'To keep it, log in to the hub and press "I\'m still here" at\n{link}\n'
            "(once per server start; after that, use it: run a cell or open a file)."
        )
    else:
        act = (
            "To keep it, use it before then: open it from the hub at\n"
            f"{link}\nand run a cell or open a file."
        )
    lost = (
        "When it stops, what runs in it ends and its memory is lost: the variables "
        "of your notebooks and anything you have not saved. Save your work now. "
        "The files in your home folder are kept."
    )
    if warning.suspend:
        lost = (
            "When it is suspended, its GPUs go to others and what runs in it is kept: "
            "start it again from the hub to resume where you left it, with your kernels "
            "and their variables. If the hub cannot suspend it, you will be warned again "
            "before it is stopped."
        )
    body = "\n\n".join(
        [
            f"Hello {clean(user)},",
            f"{which}{holds} has been idle for {idle}. It will be {verb} at "
            f"{when} unless it is used before then.",
            lost,
            act,
            "-- \nThe GPU hub's idle culler sends one such mail per warning; the same "
            "warning shows on the hub's pages.",
        ]
    )
    return MailWords(clean(subject, 200), body + "\n")
