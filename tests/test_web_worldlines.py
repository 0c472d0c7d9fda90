"""The companion's worldlines over the web API (issue 20), on the real gateway with the
worldlines package (sandboxed) on a temporary workspace: the open forks listed, a fork's
diff shown, a commit asked from the page becomes a consent card that the page's device key
signs (only then is the fork current), a discard leaves the workspace untouched; refusals
are text keys."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nacl.public import PrivateKey
from nacl.signing import SigningKey

pytest.importorskip("webauthn")

from hub.gateway import CallContext, ToolCall, open_gateway
from hub.timeline import HubStore
from hub.web import texts
from hub.web.app import WebApp
from hub.web.sessions import Passkeys
from protos.codec import signing_input
from protos.signed import APPROVAL_CONTEXT
from provisioning.home import Home
from provisioning.pairing import issue_code
from provisioning.registry import DeviceRecord, Registry
from storage.worldlines import Worldlines
from tests.gateway_kit import REPO
from tests.test_web_app import call, page_link, signature

pytestmark = pytest.mark.slow


async def test_a_fork_shown_committed_by_a_signed_card_and_discarded(tmp_path: Path) -> None:
    ws = tmp_path / "owner" / "ws"
    ws.mkdir(parents=True)
    (ws / "notes.txt").write_text("buy milk\n")
    state = tmp_path / "state"
    state.mkdir()
    env_for = {"YIMI_STATE_DIR": str(state), "YIMI_WORKSPACE": str(ws)}
    home = Home.init(tmp_path / "home")
    registry = Registry(home.path / "registry.db")
    store = HubStore(home.path / "hub.db")
    passkeys = Passkeys(home.path / "web.db")
    async with open_gateway(
        tmp_path / "gw",
        packages=[REPO / "packages" / "worldlines"],
        env_for=lambda *_: dict(env_for),
    ) as gw:

        async def answer(approval: Any, rec: DeviceRecord, trace: str) -> Any:
            ans, _ = await gw.answer(
                approval, device_id=rec.device_id, sign_pk=rec.sign_pk, scopes=rec.scopes
            )
            return ans

        link = page_link(home, registry, store, passkeys, gateway=lambda: gw, answer=answer)
        app = WebApp(link)
        key = SigningKey.generate()
        code, _ = issue_code(home)
        paired = {
            "code": code,
            "name": "page-phone",
            "sign_pk": bytes(key.verify_key).hex(),
            "box_pk": bytes(PrivateKey.generate().public_key).hex(),
        }
        status, _, out = await call(app, "POST", "/api/pair", json.dumps(paired).encode())
        assert status == 200, out
        device_id = json.loads(out)["device_id"]
        _, _, out = await call(app, "GET", "/api/challenge")
        challenge = json.loads(out)["challenge"]
        opened = {
            "device_id": device_id,
            "challenge": challenge,
            "signature": signature(key, challenge).hex(),
        }
        _, headers, _ = await call(app, "POST", "/api/session", json.dumps(opened).encode())
        token = headers["set-cookie"].split(";")[0].split("=", 1)[1]

        async def request(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            raw = b"" if body is None else json.dumps(body).encode()
            status, _, out = await call(app, method, path, raw, cookie=token)
            return status, json.loads(out)

        # the package starts lazily (a sandboxed process): started here, not within the
        # ASGI helper's 10 s per request
        async with asyncio.timeout(90):
            warm = await gw.call(ToolCall("worldlines", "list", {}, "warm", "warm"), CallContext())
        assert warm.status == "succeeded", warm

        w = Worldlines(ws)
        a, b = w.fork_many(2, "tidy")
        (w.path(a.id) / "notes.txt").write_text("buy bread\n")
        (w.path(b.id) / "junk.txt").write_text("x\n")

        status, out = await request("GET", "/api/worldlines")
        assert status == 200, out
        assert [f["target"] for f in out["forks"]] == [a.id, b.id]
        assert out["forks"][0]["fields"]["label"] == "tidy 1/2"

        status, out = await request("GET", f"/api/worldlines/worldlines/{a.id}")
        assert status == 200 and out["diff"]["changed"] == "notes.txt", out
        assert "+buy bread" in out["diff"]["diff"]

        # the commit button: a consent card, signed with the page's device key
        status, out = await request("POST", f"/api/worldlines/worldlines/{a.id}/commit", {})
        assert status == 200 and out["status"] == "waiting" and out["card_id"], out
        assert (ws / "notes.txt").read_text() == "buy milk\n", "nothing changes unsigned"
        card = out["card_id"]
        status, out = await request("POST", f"/api/cards/{card}/prepare", {"decision": "approve"})
        assert status == 200, out
        signed = key.sign(signing_input(APPROVAL_CONTEXT, bytes.fromhex(out["body"]))).signature
        status, out = await request(
            "POST", f"/api/cards/{card}/answer", {"signature": signed.hex()}
        )
        assert status == 200 and out["outcome"] == "approved", out
        assert (ws / "notes.txt").read_text() == "buy bread\n"

        # the other version is stale now; discarding it leaves the workspace as it is
        status, out = await request("POST", f"/api/worldlines/worldlines/{b.id}/discard", {})
        assert status == 200 and out["discarded"] == b.id, out
        assert not (ws / "junk.txt").exists()

        status, out = await request("GET", f"/api/worldlines/worldlines/{b.id}")
        assert (status, out["error"]) == (409, "web.worldline_failed"), out
        status, out = await request("GET", "/api/worldlines/nope/x")
        assert (status, out["error"]) == (404, "web.worldline_package")
        status, _, out_raw = await call(app, "GET", "/api/worldlines")
        assert (status, json.loads(out_raw)["error"]) == (401, "web.session_required")
    passkeys.close()
    store.close()
    registry.close()
    for k in ("web.worldline_failed", "web.worldline_package", "worldlines.commit"):
        assert k in texts.TEXTS
