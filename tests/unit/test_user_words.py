"""What a student reads: refusals as one sentence, the queue's lines, the login refusal
(issue 36, "errors speak the user's language" and "waiting explains itself")."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from jupyterhub.utils import format_exception

from jupyterhub_gpu.core.waiting import joined_line, news_html, queued_reason
from jupyterhub_gpu.errors import GPUQuotaExceeded, NoCapacity
from jupyterhub_gpu.hub.auth.ldap import not_allowed_message
from jupyterhub_gpu.hub.refusal import spawn_error, spawn_refusal

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    "error",
    [
        GPUQuotaExceeded("You hold 2 GPUs in 2 servers and asked for 1 more (max 2); stop one."),
        NoCapacity("No GPU is free right now. Try later."),
    ],
)
def test_a_user_facing_error_is_shown_as_its_sentence(error: Exception) -> None:
    e = spawn_error(error)  # type: ignore[arg-type]
    text, html = format_exception(e)  # what the form, progress page and API show
    assert text == str(error) and html == str(error)
    for internal in ("SpawnException", "reason=", type(error).__name__, str(e.status_code)):
        assert internal not in text
    assert e.reason == error.reason and e.status_code == error.status_code  # type: ignore[attr-defined]


def test_a_refusal_escapes_its_html() -> None:
    e = spawn_refusal("Image <b> & co is gone.", reason="image", status_code=503)
    assert format_exception(e) == ("Image <b> & co is gone.", "Image &lt;b&gt; &amp; co is gone.")
    assert "503 SpawnException(reason=image)" in str(e)  # the log keeps the long form


@pytest.mark.parametrize(
    "why, queued",
    [
        ("No GPU is free right now. Try later.", "No GPU is free right now."),
        (
            "No RTX 3090 is free; free now: 2 x TITAN X on b. Choose 'any GPU' or try later.",
            "No RTX 3090 is free; free now: 2 x TITAN X on b. Choose 'any GPU'.",
        ),
        (
            "Those can't run this image: choose another image or try later.",
            "Those can't run this image: choose another image.",
        ),
        ("Others are waiting for GPUs before you.", "Others are waiting for GPUs before you."),
        ("Try later.", ""),
    ],
)
def test_a_queued_spawn_is_not_told_to_try_later(why: str, queued: str) -> None:
    assert queued_reason(why) == queued
    assert "later" not in joined_line(why, "1 h").lower()


def test_the_joined_line() -> None:
    assert joined_line("Try later.", "2 min") == "Your server waits in line for GPUs (up to 2 min)."


def test_the_estimate_is_a_time_the_browser_shows_in_its_zone() -> None:
    at = NOW + 20 * 60
    words = "1st in line for a GPU. A GPU is expected to free up by about 13:20 CET (a cull)."
    got = news_html(words, at, NOW, ZoneInfo("Europe/Paris"))
    assert '<time datetime="2026-11-24T12:20:00Z">13:20 CET</time>' in got
    assert news_html("a < b", None, NOW) == "a &lt; b"


@pytest.mark.parametrize(
    "groups, sentence",
    [
        (
            ["cn=gpu-users,ou=groups,dc=example,dc=org"],
            "Your account is not allowed on this hub (not in the group gpu-users); ask your admin.",
        ),
        (
            ["cn=a100-users,ou=groups,dc=x", "students"],
            "Your account is not allowed on this hub (not in any of the groups a100-users, "
            "students); ask your admin.",
        ),
        (None, "Your account is not allowed on this hub; ask your admin."),
        ([], "Your account is not allowed on this hub; ask your admin."),
    ],
)
def test_the_not_allowed_sentence_names_groups_never_dns(
    groups: list[str] | None, sentence: str
) -> None:
    assert not_allowed_message(groups) == sentence
