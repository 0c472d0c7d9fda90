"""messaging: e-mail over SMTP as an MCP stdio server (the real backend).

Environment (set by the hub from the package's settings; secrets resolved by the hub):
``YIMI_SMTP_HOST``, ``YIMI_SMTP_PORT``, ``YIMI_SMTP_FROM``, ``YIMI_SMTP_USER``,
``SMTP_PASSWORD``, ``YIMI_SMTP_TIMEOUT`` (seconds), ``YIMI_STATE_DIR`` (its sent log).

Every tool returns a receipt. ``send_email`` is idempotent on the gateway's
``idempotency_key``: a key already sent returns the recorded receipt without sending again.
The SMTP server's 250 reply is a ``service_ack``; a timeout or a dropped connection after
the message was handed over is reported as such (the gateway makes it ``unknown``).
"""

from __future__ import annotations

import os
import smtplib
import sys
import time
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import receipt, sent_log

mcp = MCPServer("messaging")
LOG = sent_log(Path(os.environ.get("YIMI_STATE_DIR", ".")) / "messaging-sent.db")


def _smtp_send(msg: EmailMessage) -> str:
    host = os.environ.get("YIMI_SMTP_HOST", "127.0.0.1")
    port = int(os.environ.get("YIMI_SMTP_PORT", "25"))
    timeout = float(os.environ.get("YIMI_SMTP_TIMEOUT", "20"))
    with smtplib.SMTP(host, port, timeout=timeout) as smtp:
        user, password = os.environ.get("YIMI_SMTP_USER"), os.environ.get("SMTP_PASSWORD")
        if user and password:
            smtp.starttls()
            smtp.login(user, password)
        refused = smtp.send_message(msg)
    if refused:
        raise smtplib.SMTPRecipientsRefused(refused)
    return str(msg["Message-ID"])


@mcp.tool()
def send_email(to: str, subject: str, body: str, idempotency_key: str = "") -> dict[str, Any]:
    """Send an e-mail to one recipient. The recipient and the content are shown to the owner
    for confirmation the first time this kind of message goes to this recipient."""
    key = idempotency_key or make_msgid()
    done = LOG.execute("SELECT state, message_id FROM sent WHERE key=?", (key,)).fetchone()
    if done and done[0] == "sent":
        return receipt(
            "succeeded",
            effects=[
                {
                    "kind": "email.sent",
                    "state": "service_ack",
                    "target": to,
                    "fields": {"to": to, "subject": subject, "message_id": done[1]},
                }
            ],
        )
    msg = EmailMessage()
    msg["From"] = os.environ.get("YIMI_SMTP_FROM", "assistant@localhost")
    msg["To"] = to
    msg["Subject"] = subject
    msg["Message-ID"] = make_msgid(domain="yimi.local")
    msg.set_content(body)
    with LOG:
        LOG.execute(
            "INSERT OR REPLACE INTO sent VALUES (?,?,?,?,?,?)",
            (key, to, subject, msg["Message-ID"], "attempted", int(time.time() * 1000)),
        )
    try:
        message_id = _smtp_send(msg)
    except TimeoutError as exc:
        return receipt("failed", error=("TIMEOUT", f"the SMTP server did not answer: {exc}"))
    except (smtplib.SMTPServerDisconnected, ConnectionResetError) as exc:
        return receipt("failed", error=("DISCONNECTED", f"the SMTP connection dropped: {exc}"))
    except smtplib.SMTPRecipientsRefused as exc:
        with LOG:
            LOG.execute("UPDATE sent SET state='refused' WHERE key=?", (key,))
        return receipt("failed", error=("RECIPIENT_REFUSED", str(exc)[:300]))
    except (smtplib.SMTPException, OSError) as exc:
        with LOG:
            LOG.execute("UPDATE sent SET state='failed' WHERE key=?", (key,))
        return receipt("failed", error=("SMTP_ERROR", str(exc)[:300]))
    with LOG:
        LOG.execute("UPDATE sent SET state='sent' WHERE key=?", (key,))
    return receipt(
        "succeeded",
        effects=[
            {
                "kind": "email.sent",
                "state": "service_ack",
                "target": to,
                "fields": {"to": to, "subject": subject, "message_id": message_id},
            }
        ],
    )


@mcp.tool()
def find_sent(idempotency_key: str = "", to: str = "", subject: str = "") -> dict[str, Any]:
    """Check whether an e-mail was sent (by the key of the call, or recipient and subject)."""
    from common import find

    return find(LOG, idempotency_key, to, subject)


if __name__ == "__main__":
    mcp.run("stdio")
