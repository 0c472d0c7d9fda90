"""messaging fake: the same tools and receipts as the real server, no e-mail leaves.

"Sent" messages land in the fake's own log (``YIMI_STATE_DIR/messaging-fake.db``), so
``find_sent`` answers as the real one would.
"""

from __future__ import annotations

import os
import sys
import time
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from hub.capabilities.package_server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import find, receipt, sent_log

mcp = MCPServer("messaging-fake")
LOG = sent_log(Path(os.environ.get("YIMI_STATE_DIR", ".")) / "messaging-fake.db")


@mcp.tool()
def send_email(to: str, subject: str, body: str, idempotency_key: str = "") -> dict[str, Any]:
    """Send an e-mail to one recipient (fake: recorded, not sent)."""
    key = idempotency_key or make_msgid()
    row = LOG.execute("SELECT message_id FROM sent WHERE key=?", (key,)).fetchone()
    message_id = row[0] if row else make_msgid(domain="fake.yimi.local")
    if row is None:
        with LOG:
            LOG.execute(
                "INSERT INTO sent VALUES (?,?,?,?,?,?)",
                (key, to, subject, message_id, "sent", int(time.time() * 1000)),
            )
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
    return find(LOG, idempotency_key, to, subject)


if __name__ == "__main__":
    mcp.run("stdio")
