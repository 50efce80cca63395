"""The culler's warning mail as it goes to the SMTP server (RFC 5322 bytes): the one
encoder of it. Pure: words and addresses in, the envelope and the message out.

Headers are set through the standard library's ``email`` package (policy ``SMTP``:
CRLF line ends, non-ASCII words encoded), which refuses a CR or LF in any header value;
the words arrive cleaned and bounded (:func:`~jupyterhub_gpu.core.culling.mail.clean`)
and the addresses checked (:func:`~jupyterhub_gpu.core.culling.mail.valid_address`), so
nothing a user chose can add a header or a recipient.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime

from jupyterhub_gpu.core.culling.mail import MailWords, valid_address


@dataclass(frozen=True)
class OutgoingMail:
    """One message: the envelope's sender and recipient, and the message's bytes."""

    sender: str
    recipient: str
    data: bytes


def encode_warning_mail(
    words: MailWords,
    *,
    sender: tuple[str, str],
    recipient: str,
    date: datetime,
    message_id: str,
) -> OutgoingMail:
    """The mail of ``words`` from ``sender`` (display name, address) to ``recipient``.
    ``ValueError`` for an address that is not plain (the caller checked it already)."""
    name, address = sender
    if not valid_address(address) or not valid_address(recipient):
        raise ValueError("not a plain address")
    msg = EmailMessage(policy=SMTP)
    msg["From"] = Address(display_name=name, addr_spec=address)
    msg["To"] = Address(addr_spec=recipient)
    msg["Subject"] = words.subject
    msg["Date"] = format_datetime(date)
    msg["Message-ID"] = message_id
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to it
    msg.set_content(words.body, charset="utf-8")
    return OutgoingMail(address, recipient, msg.as_bytes())
