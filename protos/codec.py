"""Codec helpers: bounded parsing of untrusted bytes and signature domain separation."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import DecodeError, Message

M = TypeVar("M", bound=Message)

ENVELOPE_CONTEXT = b"yimi.envelope.v1"
CERTIFICATE_CONTEXT = b"yimi.certificate.v1"
IDENTIFY_CONTEXT = b"yimi.identify.v1"
RPC_AUTH_CONTEXT = b"yimi.rpc-auth.v1"
# the contexts of what an owner's phone signs (card answers, unlock leases, payment options)
# are in protos.signed, with the one signing and verifying helper


def signing_input(context: bytes, body: bytes) -> bytes:
    """What a signature covers: ``context || 0x00 || body`` (no cross-type confusion)."""
    return context + b"\x00" + body


def parse(cls: type[M], data: bytes, max_len: int) -> M | None:
    """Parse ``data`` as ``cls``; ``None`` if it is longer than ``max_len`` or malformed.

    Never raises: protobuf decoding of hostile bytes can fail in several ways.
    """
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) > max_len:
        return None
    msg = cls()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, ValueError, RuntimeError, TypeError, RecursionError):
        return None
    return msg
