"""The culler's warnings by e-mail (issue 35, item 2): the words, the addresses, the
message, and the culler's warning round against a real SMTP server (aiosmtpd, on this
test's loop, on a port of 127.0.0.1), read back as it received them. The hub, servers and
agents are test_culler_service.py's fakes (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import timedelta
from email import message_from_bytes
from email.message import Message
from email.policy import default as default_policy
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx
import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from traitlets.config import Config

from jupyterhub_gpu.core.culling.idleness import Signal
from jupyterhub_gpu.core.culling.mail import (
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
from jupyterhub_gpu.edges.files import load_cull_warnings
from jupyterhub_gpu.edges.mail import read_password
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.extensions import configure_culler
from jupyterhub_gpu.services.culler.app import GPUIdleCuller
from jupyterhub_gpu.wire.cull_mail import encode_warning_mail
from tests.unit.test_culler_service import T0, World, make_culler, poll, server

pytestmark = pytest.mark.unit

PARIS = ZoneInfo("Europe/Paris")
SENDER = ("GPU hub", "gpu-hub@lab.example")
PASSWORD = "s3cret-smtp-password"


@pytest.fixture
def world() -> World:
    return World()


def warning(postponable: bool = True) -> CullWarning:
    return CullWarning(T0 + timedelta(minutes=10), T0 - timedelta(minutes=50), T0, postponable)


# -- the words and the addresses (pure) ------------------------------------------------------


def test_the_mail_says_which_server_when_in_the_sites_zone_what_is_lost_and_where() -> None:
    words = warning_mail_words(
        "alice", "train", 1, warning(), T0, PARIS, "https://hub.lab.example/hub/home", True
    )
    # 12:10 UTC is 13:10 in Paris in January
    assert words.subject == "Your server 'train' will be stopped at 13:10 CET if it stays idle"
    body = words.body
    assert body.startswith("Hello alice,\n\nYour server 'train' (it holds 1 GPU) has been idle ")
    assert "idle for 50 min. It will be stopped at 13:10 CET unless it is used" in body
    assert "the variables of your notebooks and anything you have not saved" in body
    assert "files in your home folder are kept" in body
    assert 'press "I\'m still here" at\nhttps://hub.lab.example/hub/home\n' in body
    # the second warning of a start: no button, use it
    later = warning_mail_words(
        "alice", "", 0, warning(False), T0, PARIS, "https://h/hub/home", False
    )
    assert later.subject.startswith("Your server will be stopped at 13:10 CET")
    assert "I'm still here" not in later.body and "use it before then" in later.body
    assert "holds" not in later.body  # a CPU-only server
    # another day: the date is said
    tomorrow = warning_mail_words("a", "", 0, warning(), T0 - timedelta(days=1), PARIS, "x", True)
    assert "Thu 01 Jan 13:10 CET" in tomorrow.subject


def test_the_mail_of_a_suspend_says_suspended_and_what_is_kept() -> None:
    suspend = replace(warning(), suspend=True)
    words = warning_mail_words("alice", "", 1, suspend, T0, PARIS, "https://h/hub/home", True)
    assert words.subject == "Your server will be suspended at 13:10 CET if it stays idle"
    assert "idle for 50 min. It will be suspended at 13:10 CET unless it is used" in words.body
    assert "resume where you left it, with your kernels and their variables" in words.body
    assert "you will be warned again before it is stopped" in words.body
    assert "Save your work" not in words.body and "is lost" not in words.body


def test_user_chosen_text_is_cleaned_and_bounded() -> None:
    assert clean("x\r\nBcc: eve@evil.example") == "xBcc: eve@evil.example"
    assert clean("a\tb\u202eevil\x1b[31m") == "abevil[31m"
    assert clean("  many   spaces  ") == "many spaces"
    assert clean("n" * 500) == "n" * 63 + "…"
    words = warning_mail_words(
        "u\r\nX: 1", "s\nBcc: e@x.example", 0, warning(), T0, PARIS, "l", True
    )
    assert "\n" not in words.subject and "\r" not in words.body
    assert words.body.startswith("Hello uX: 1,")


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        ("alice@lab.example", True),
        ("a.b+c@mail.lab-x.example", True),
        ("alice@localhost", True),
        ("alice\r\nbcc@lab.example", False),
        ("alice smith@lab.example", False),
        ("a@b@lab.example", False),
        ("josé@lab.example", False),
        (".alice@lab.example", False),
        ("alice@lab..example", False),
        ("alice@-lab.example", False),
        ('"quoted"@lab.example', False),
        ("x" * 65 + "@lab.example", False),
        ("a@" + "b" * 250 + ".example", False),
        ("", False),
    ],
)
def test_only_plain_addresses_get_mail(address: str, ok: bool) -> None:
    assert valid_address(address) is ok


def test_the_address_template() -> None:
    assert check_address_template("{username}@lab.example") == "{username}@lab.example"
    assert address_of("{username}@lab.example", "alice") == "alice@lab.example"
    assert address_of("{username}@lab.example", "eve\r\nBcc: x@evil.example") is None
    assert address_of("{username}@lab.example", "a" * 10_000) is None
    bad_ones = ("{user}@lab.example", "{username}{username}@x.example", "{username!r}@x.y",
                "{username:>9}@x.y", "alice@lab.example", "{username}", "{0}@x.y",
                "{username")  # fmt: skip
    for bad in bad_ones:
        with pytest.raises(ConfigError, match=r"GPUIdleCuller\.mail_address"):
            check_address_template(bad)


def test_the_sender_and_the_link_are_checked() -> None:
    assert check_sender("gpu-hub@lab.example") == ("", "gpu-hub@lab.example")
    assert check_sender("GPU hub <gpu-hub@lab.example>") == SENDER
    for bad in ("GPU hub", "x <a@b.example>\r\nBcc: e@x.example", "<>", "a@b.example, c@d.example"):
        with pytest.raises(ConfigError, match=r"mail_from"):
            check_sender(bad)
    assert check_hub_url("https://hub.lab.example/prefix/") == "https://hub.lab.example/prefix"
    assert home_link("https://hub.lab.example/prefix") == "https://hub.lab.example/prefix/hub/home"
    # nothing that could carry a credential, nor a scheme a mail client would run
    for bad in ("https://alice:pw@hub.lab.example", "https://token@hub.lab.example",
                "https://hub.lab.example/?token=abc", "https://hub.lab.example/#t",
                "javascript:alert(1)", "hub.lab.example", "https://hub.lab.example:99999",
                "https://hub.lab.example/\r\nX"):  # fmt: skip
        with pytest.raises(ConfigError, match=r"mail_hub_url"):
            check_hub_url(bad)


def test_the_message_has_one_recipient_and_no_header_of_the_users_making() -> None:
    words = warning_mail_words(
        "bob", "x\r\nBcc: eve@evil.example", 0, warning(), T0, PARIS, "l", True
    )
    mail = encode_warning_mail(
        words, sender=SENDER, recipient="bob@lab.example", date=T0, message_id="<m@lab.example>"
    )
    assert (mail.sender, mail.recipient) == ("gpu-hub@lab.example", "bob@lab.example")
    msg = message_from_bytes(mail.data, policy=default_policy)
    assert msg["Bcc"] is None and msg["To"] == "bob@lab.example"
    assert msg["From"] == "GPU hub <gpu-hub@lab.example>"
    assert (
        msg["Subject"]
        == "Your server 'xBcc: eve@evil.example' will be stopped at 13:10 CET if it stays idle"
    )
    assert msg["Auto-Submitted"] == "auto-generated"
    with pytest.raises(ValueError):
        encode_warning_mail(words, sender=SENDER, recipient="a\r\n@b", date=T0, message_id="<m@x>")


def test_the_password_file(tmp_path: Path) -> None:
    f = tmp_path / "smtp-password"
    f.write_text(PASSWORD + "\n")
    assert read_password(str(f)) == PASSWORD
    f.write_text("\n")
    with pytest.raises(ConfigError, match="is empty") as e:
        read_password(str(f))
    with pytest.raises(ConfigError, match="can't be read"):
        read_password(str(tmp_path / "missing"))
    f.write_text("pässword")
    with pytest.raises(ConfigError, match="not ASCII") as e:
        read_password(str(f))
    assert "pässword" not in str(e.value)
    f.write_text(PASSWORD + "x" * 5000)
    with pytest.raises(ConfigError, match="longer than") as e:
        read_password(str(f))
    assert PASSWORD not in str(e.value)


# -- a real SMTP server -----------------------------------------------------------------------


class Inbox:
    """aiosmtpd's handler: every message it accepted, and every login it was offered."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.logins: list[tuple[bytes, bool]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 OK"

    def messages(self) -> list[Message]:
        return [
            message_from_bytes(bytes(e.content or b""), policy=default_policy)
            for e in self.envelopes
        ]  # type: ignore[arg-type]

    def authenticator(self, server: SMTP, session: Session, envelope: Envelope, mechanism: str,
                      data: Any) -> AuthResult:  # fmt: skip
        ok = isinstance(data, LoginPassword) and data.password == PASSWORD.encode()
        self.logins.append((data.login if isinstance(data, LoginPassword) else b"", ok))
        return AuthResult(success=ok, handled=False)  # a refusal answers 535


@pytest.fixture
async def smtpd() -> AsyncIterator[Callable[..., Any]]:
    """Start a real SMTP server on this loop: ``await smtpd(**SMTP kwargs)`` -> (inbox, port)."""
    servers: list[asyncio.AbstractServer] = []
    loop = asyncio.get_running_loop()

    async def start(**kwargs: Any) -> tuple[Inbox, int]:
        inbox = Inbox()
        if kwargs.pop("login", False):
            kwargs["authenticator"] = inbox.authenticator
        srv = await loop.create_server(
            lambda: SMTP(inbox, hostname="mail.test", loop=loop, **kwargs), "127.0.0.1", 0
        )
        servers.append(srv)
        return inbox, srv.sockets[0].getsockname()[1]

    yield start
    for srv in servers:
        srv.close()
        await srv.wait_closed()


def records(culler: GPUIdleCuller) -> list[logging.LogRecord]:
    """Every record the culler logs from now on, at any level."""
    found: list[logging.LogRecord] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found.append(record)

    culler.log.addHandler(Recorder(logging.DEBUG))
    culler.log.setLevel(logging.DEBUG)
    return found


def text(found: list[logging.LogRecord]) -> str:
    return "\n".join(r.getMessage() for r in found)


def mailing(world: World, tmp_path: Path, port: int, **traits: Any) -> GPUIdleCuller:
    settings: dict[str, Any] = {
        "warn_before": 600.0,
        "warnings_file": str(tmp_path / "warnings.json"),
        "mail_warnings": True,
        "mail_smtp_host": "127.0.0.1",
        "mail_smtp_port": port,
        "mail_security": "none",
        "mail_from": "GPU hub <gpu-hub@lab.example>",
        "mail_address": "{username}@lab.example",
        "mail_hub_url": "https://hub.lab.example",
        "mail_timezone": "Europe/Paris",
        **traits,
    }
    culler = make_culler(world, tmp_path, **settings)
    culler.check_config()
    return culler


def dead_port() -> int:
    """A port of 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_warning_is_mailed_once_to_its_user_and_read_as_sent(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    inbox, port = await smtpd()
    culler = mailing(world, tmp_path, port)
    await poll(culler)
    first = await culler.cull_once(now=T0)
    assert first["alice"].signal is Signal.WARNED and first["erin/train"].signal is Signal.WARNED
    # one mail per warned server, each to its user alone (erin's: a named CPU-only server)
    assert [e.rcpt_tos for e in inbox.envelopes] == [["alice@lab.example"], ["erin@lab.example"]]
    assert {e.mail_from for e in inbox.envelopes} == {"gpu-hub@lab.example"}
    msg, erins = inbox.messages()
    assert erins["Subject"] == "Your server 'train' will be stopped at 13:10 CET if it stays idle"
    assert msg["To"] == "alice@lab.example" and msg["From"] == "GPU hub <gpu-hub@lab.example>"
    assert msg["Subject"] == "Your server will be stopped at 13:10 CET if it stays idle"
    body = msg.get_body().get_content().replace("\r\n", "\n")  # type: ignore[union-attr]
    assert "Your server (it holds 1 GPU) has been idle for" in body
    assert 'press "I\'m still here" at\nhttps://hub.lab.example/hub/home\n' in body
    # the link carries nothing but the page: no token, no user, no query
    assert "token" not in body.lower() and "svc-token" not in msg.as_string()
    # the next rounds keep the same warning: no second mail; the cull comes on time
    await poll(culler, start=-1, stop=-9)
    still = await culler.cull_once(now=T0 + timedelta(minutes=9))
    assert still["alice"].signal is Signal.WARNED and len(inbox.envelopes) == 2
    await poll(culler, start=-10, stop=-10)
    done = await culler.cull_once(now=T0 + timedelta(minutes=10))
    assert done["alice"].cull and len(inbox.envelopes) == 2


async def test_starttls_and_a_login_from_a_file_never_logged(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    from tests.support.pki import issue, make_ca

    ca = make_ca(tmp_path, "mail-ca")
    cert, key = issue(tmp_path, ca, "mail", "IP:127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    inbox, port = await smtpd(tls_context=context, require_starttls=True, login=True,
                              auth_required=True)  # fmt: skip
    secret = tmp_path / "smtp-password"
    secret.write_text(PASSWORD + "\n")
    culler = mailing(world, tmp_path, port, mail_security="starttls", mail_ca_cert=str(ca[1]),
                     mail_username="culler", mail_password_file=str(secret))  # fmt: skip
    log = records(culler)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert inbox.logins == [(b"culler", True)]  # one connection for the round's two mails
    assert [e.rcpt_tos for e in inbox.envelopes] == [["alice@lab.example"], ["erin@lab.example"]]
    # a wrong password: one line that names the user and what to check, not the password
    secret.write_text("wrong-" + PASSWORD)
    world.users[1]["servers"][""]["last_activity"] = world.users[0]["servers"][""]["last_activity"]
    world.kernels.pop("/user/bob/")  # bob's kernel idle too: he is warned in the next round
    world.gpu_util["GPU-a1"] = 0.0
    await poll(culler, start=-1, stop=-2)
    await culler.cull_once(now=T0 + timedelta(minutes=2))
    lines = [r.getMessage() for r in log if "mail" in r.getMessage().lower()]
    assert any("refused the login of 'culler'" in line and "mail_password_file" in line
               for line in lines), lines  # fmt: skip
    assert len(inbox.envelopes) == 2 and inbox.logins[1] == (b"culler", False)
    assert PASSWORD not in text(log) and "wrong-" not in text(log)


async def test_a_dead_smtp_server_changes_nothing_else(world: World, tmp_path: Path) -> None:
    """The same rounds with mail through a dead server and without mail: the same
    decisions, the same warnings file, the same stop; one log line per round that had
    something to mail, saying what to fix, and no attempt in rounds with nothing new."""
    silent = World()
    quiet = make_culler(silent, tmp_path / "quiet", warn_before=600.0,
                        warnings_file=str(tmp_path / "quiet-warnings.json"))  # fmt: skip
    culler = mailing(world, tmp_path, dead_port())
    log = records(culler)
    for c in (quiet, culler):
        await poll(c)
    for minutes, start, stop in ((0, 40, 0), (9, -1, -9), (10, -10, -10)):
        now = T0 + timedelta(minutes=minutes)
        if minutes:
            await poll(quiet, start, stop)
            await poll(culler, start, stop)
        log.clear()
        assert await culler.cull_once(now=now) == await quiet.cull_once(now=now)
        failed = [r for r in log if "warning mail(s) not sent" in r.getMessage()]
        if minutes == 0:
            (line,) = failed
            assert line.levelno == logging.WARNING
            assert "no SMTP server at 127.0.0.1:" in line.getMessage()
            assert "check GPUIdleCuller.mail_smtp_host and mail_smtp_port" in line.getMessage()
            assert load_cull_warnings(tmp_path / "warnings.json") == load_cull_warnings(
                tmp_path / "quiet-warnings.json"
            )
        else:
            assert failed == []  # nothing new to mail: no retry of the failed one
    stopped = ["/hub/api/users/alice/server", "/hub/api/users/erin/servers/train"]
    assert world.deletes() == silent.deletes() == stopped


async def test_a_name_that_is_no_address_gets_no_mail_and_one_log_line(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    evil = "eve\r\nbcc: x@evil.example"
    evil_server = "s\r\nBcc: y@evil.example"
    eves, bobs = server(evil, gpus=("GPU-a0",)), server("bob", evil_server, gpus=("GPU-a1",))
    # the hub's URLs of them, escaped as the hub escapes them
    eves[1]["url"] = f"/user/{quote(evil, safe='')}/"
    bobs[1]["url"] = f"/user/bob/{quote(evil_server, safe='')}/"
    world.users = [World.user(evil, eves), World.user("bob", bobs)]
    world.kernels = {}
    world.gpu_util["GPU-a1"] = 0.0
    inbox, port = await smtpd()
    culler = mailing(world, tmp_path, port)
    log = records(culler)
    await poll(culler)
    await culler.cull_once(now=T0)
    # eve: no mail at all; bob: his one mail, to him alone, no header of his server's name
    assert [e.rcpt_tos for e in inbox.envelopes] == [["bob@lab.example"]]
    (msg,) = inbox.messages()
    assert msg["Bcc"] is None and "\n" not in str(msg["Subject"])
    assert str(msg["Subject"]).startswith("Your server 'sBcc: y@evil.example' will be stopped")
    (line,) = [r.getMessage() for r in log if r.getMessage().startswith("No mail to")]
    assert line == "No mail to 'evebcc: x@evil.example': no plain address (local@domain) " \
                   "for that user; check GPUIdleCuller.mail_address"  # fmt: skip


async def test_an_async_callable_finds_the_address_from_the_user_model(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    seen: list[str] = []

    async def ldap_mail(user: dict[str, Any]) -> str | None:
        seen.append(user["name"])
        return {"alice": "Alice.Liddell@lab.example"}.get(user["name"])

    inbox, port = await smtpd()
    culler = mailing(world, tmp_path, port, mail_address=ldap_mail)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert seen == ["alice", "erin"]  # erin's: None, so no mail
    assert [e.rcpt_tos for e in inbox.envelopes] == [["Alice.Liddell@lab.example"]]


async def test_a_dry_run_mails_nothing(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    inbox, port = await smtpd()
    culler = mailing(world, tmp_path, port, dry_run=True)
    log = records(culler)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert inbox.envelopes == []
    assert "Would mail the warning to alice@lab.example (dry run)" in text(log)


@pytest.mark.parametrize(
    ("traits", "says"),
    [
        ({"mail_smtp_host": ""}, "mail_smtp_host is not set"),
        ({"mail_from": "", "mail_address": ""}, "mail_from, mail_address are not set"),
        ({"mail_hub_url": ""}, "mail_hub_url is not set"),
        ({"mail_username": "culler"}, "go together"),
        ({"mail_username": "c", "mail_password_file": "/etc/hostname"}, "in clear"),
        (
            {"mail_security": "tls", "mail_username": "c", "mail_password_file": "/nonexistent"},
            "can't be read",
        ),
        ({"mail_timeout": 0.0}, "mail_timeout"),
    ],
)
def test_mail_on_but_unusable_refuses_to_start(
    world: World, tmp_path: Path, traits: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        mailing(world, tmp_path, 2525, **traits)


def test_bad_mail_values_are_refused_when_set() -> None:
    bad = {
        "mail_address": "{user}@x.example",
        "mail_from": "nobody",
        "mail_hub_url": "https://u:p@hub.example",
        "mail_timezone": "Mars/Base",
    }
    for key, value in bad.items():
        with pytest.raises(ConfigError, match=key):
            GPUIdleCuller(**{key: value})


def test_mail_is_off_by_default_and_configure_culler_passes_the_url_and_the_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert GPUIdleCuller().mail_warnings is False
    c = Config()
    c.JupyterHub.public_url = "https://hub.lab.example/jh/"
    c.GPUDockerSpawner.queue_policy = {"timezone": "Europe/Paris"}
    configure_culler(c, site_secret="s" * 32)
    (service,) = c.JupyterHub.services
    env = service["environment"]
    assert env["JUPYTERHUB_PUBLIC_HUB_URL"] == "https://hub.lab.example/jh/hub/"
    assert env["JUPYTERHUB_GPU_TIMEZONE"] == "Europe/Paris"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    culler = GPUIdleCuller()
    assert culler.mail_hub_url == "https://hub.lab.example/jh"
    assert culler.mail_timezone == "Europe/Paris"
    assert home_link(culler.mail_hub_url) == "https://hub.lab.example/jh/hub/home"


async def test_a_restarted_culler_mails_no_warning_twice(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    """The culler restarts while its warnings stand: the same warnings go on (the cull at
    their time, not ``warn_before`` later) and nobody is mailed again. The same restart
    without the state file mails both users a second time (the bug this prevents)."""
    inbox, port = await smtpd()
    culler = mailing(world, tmp_path, port)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert len(inbox.envelopes) == 2
    restart = T0 + timedelta(minutes=1)
    culler.save_state(restart)  # on its way out
    again = mailing(world, tmp_path, port)
    again.load_state(now=restart)
    await poll(again, start=-1, stop=-1)
    kept = await again.cull_once(now=restart)
    assert kept["alice"].signal is Signal.WARNED and len(inbox.envelopes) == 2
    assert load_cull_warnings(tmp_path / "warnings.json")["alice/"].at == T0 + timedelta(minutes=10)
    await poll(again, start=-2, stop=-10)
    done = await again.cull_once(now=T0 + timedelta(minutes=10))
    assert done["alice"].cull and done["erin/train"].cull and len(inbox.envelopes) == 2
    # without the state file a restart warns afresh, and mails again
    fresh = World()
    amnesic = mailing(fresh, tmp_path / "amnesic", port, state_file="")
    (tmp_path / "amnesic").mkdir()
    await poll(amnesic)
    await amnesic.cull_once(now=T0)
    forgot = mailing(fresh, tmp_path / "amnesic", port, state_file="")
    await poll(forgot, start=40, stop=-1)  # the same readings: only the state file differs
    await forgot.cull_once(now=restart)
    assert [e.rcpt_tos for e in inbox.envelopes][4:] == [
        ["alice@lab.example"],
        ["erin@lab.example"],
    ]


async def test_one_mail_per_idle_stretch_even_when_the_warning_is_given_again(
    world: World, tmp_path: Path, smtpd: Callable[..., Any]
) -> None:
    """A warning dropped for missing data (alice's node's agent stops answering for a
    while) and given again when it answers is the same idle stretch: not mailed again.
    Activity ends the stretch: the next warning is mailed."""
    inbox, port = await smtpd()
    world.users = [u for u in world.users if u["name"] != "erin"]  # alice alone is warned
    culler = mailing(world, tmp_path, port)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert [e.rcpt_tos for e in inbox.envelopes] == [["alice@lab.example"]]
    healthy = world.agent_a
    world.agent_answers["agent-a.test"] = lambda: httpx.Response(503)
    await poll(culler, start=-1, stop=-1)
    blind = await culler.cull_once(now=T0 + timedelta(minutes=1))
    assert blind["alice"].signal is Signal.GPU_MISSING  # no warning shown meanwhile
    assert "alice/" not in load_cull_warnings(tmp_path / "warnings.json")
    del world.agent_answers["agent-a.test"]
    assert world.agent_a == healthy
    # observed again for 20 minutes (the warning's shorter wait): warned again, not mailed
    await poll(culler, start=-2, stop=-22)
    await culler.cull_once(now=T0 + timedelta(minutes=22))
    again = load_cull_warnings(tmp_path / "warnings.json")["alice/"]
    assert again.issued == T0 + timedelta(minutes=22) and len(inbox.envelopes) == 1
    # she comes back, then leaves again: a new stretch, a new warning, a new mail
    alice = world.users[0]["servers"][""]
    alice["last_activity"] = (T0 + timedelta(minutes=25)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await poll(culler, start=-23, stop=-26)
    assert (await culler.cull_once(now=T0 + timedelta(minutes=26)))["alice"].signal is Signal.HUB
    assert "alice/" not in load_cull_warnings(tmp_path / "warnings.json")
    await poll(culler, start=-27, stop=-46)
    await culler.cull_once(now=T0 + timedelta(minutes=46))
    assert "alice/" in load_cull_warnings(tmp_path / "warnings.json")
    assert [e.rcpt_tos for e in inbox.envelopes] == [["alice@lab.example"]] * 2


async def test_a_refused_suspend_is_mailed_again_as_a_stop(
    world: World, tmp_path: Path, smtpd: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """erin was mailed that her server would be suspended; the hub will not: the warning
    given again as a stop is mailed too, as that first mail said it would be."""
    from tests.unit.test_culler_suspend import SuspendAPI

    world.users = [u for u in world.users if u["name"] == "erin"]
    hub = SuspendAPI(world)
    monkeypatch.setattr(world, "hub", hub)
    inbox, port = await smtpd()
    culler = mailing(world, tmp_path, port, suspend=True)
    await poll(culler)
    await culler.cull_once(now=T0)
    hub.refuse("erin", 409)
    await poll(culler, start=-1, stop=-10)
    await culler.cull_once(now=T0 + timedelta(minutes=10))
    assert hub.asked == ["erin"] and world.deletes() == []
    first, second = inbox.messages()
    assert first["Subject"] == "Your server 'train' will be suspended at 13:10 CET if it stays idle"
    assert second["Subject"] == "Your server 'train' will be stopped at 13:20 CET if it stays idle"
