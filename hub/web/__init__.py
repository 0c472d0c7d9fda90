"""The phone companion and the hub dashboard: web pages the hub serves itself.

:class:`hub.web.server.WebServer` runs uvicorn's ``Server.serve()`` inside the hub's loop (an
async context manager owning its named task), on its own port; :mod:`hub.web.app` is the
Starlette app. The browser is a device: it pairs with a one-time code (``yimi hub
pair-code``) and a WebCrypto Ed25519 key it cannot export (:mod:`hub.web.sessions`: a
challenge signed by that key opens a short-lived HttpOnly, SameSite=Strict cookie; revoking
the device ends its sessions); it answers cards by signing the same ``ApprovalBody`` as
``yimi approve``, and payment cards only after WebAuthn user verification. Every page text
is in :mod:`hub.web.texts`, in English and Chinese.
"""
