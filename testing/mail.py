"""A real SMTP server on localhost for tests (aiosmtpd), keeping every message it receives."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from engine.platform.config import MailSettings


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage


@dataclass
class Mailbox:
    handler: Any
    settings: MailSettings
    messages: list[Received] = field(default_factory=list)
    refuse: bool = False  # answer 451 to every message (a mail server in trouble)


class _Handler:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.box.refuse:
            return "451 Try again later"
        parsed = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.box.messages.append(Received(envelope.mail_from, list(envelope.rcpt_tos), parsed))
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp_server() -> Iterator[Mailbox]:
    port = _free_port()
    box = Mailbox(handler=None, settings=MailSettings.parse(f"smtp://127.0.0.1:{port}", "cockpit@example.test"))  # type: ignore[arg-type]
    handler = _Handler(box)
    box.handler = handler
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
