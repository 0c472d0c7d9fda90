"""Where cold packs go: a directory, or a WebDAV server (plain HTTP, standard library).

A target stores whole packs by name and reads them back whole or by byte range (a file
seek, or an HTTP ``Range`` request), so reading one object fetches only its chunk.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Protocol

from hub.archive.errors import ArchiveError, TargetUnavailable

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 60.0


class ColdTarget(Protocol):
    """A place for cold packs. Methods block; the archive calls them off the event loop."""

    def describe(self) -> str: ...

    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str) -> bytes: ...

    def get_range(self, name: str, offset: int, length: int) -> bytes: ...

    def delete(self, name: str) -> None: ...


def _check_name(name: str) -> str:
    if not name or "/" in name or name.startswith(".") or "\\" in name:
        raise ValueError(f"bad pack name {name!r}")
    return name


class DirectoryTarget:
    """Packs as files in one folder (written to a temporary name, fsynced, renamed)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return str(self.root)

    def _path(self, name: str) -> Path:
        return self.root / _check_name(name)

    def put(self, name: str, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(name)
        tmp = path.with_name(f".{name}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise TargetUnavailable(
                "archive.target", target=self.describe(), reason=str(exc)
            ) from exc
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _failed(self, exc: OSError) -> ArchiveError:
        cls = ArchiveError if isinstance(exc, FileNotFoundError) else TargetUnavailable
        return cls("archive.target", target=self.describe(), reason=str(exc))

    def get(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except OSError as exc:
            raise self._failed(exc) from exc

    def get_range(self, name: str, offset: int, length: int) -> bytes:
        try:
            with open(self._path(name), "rb") as f:
                f.seek(offset)
                return f.read(length)
        except OSError as exc:
            raise self._failed(exc) from exc

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(name).unlink()


class WebDavTarget:
    """Packs on a WebDAV server under ``base_url`` (a collection, created on first upload).

    PUT uploads, GET with ``Range: bytes=a-b`` reads a chunk, DELETE removes, MKCOL makes the
    collection. Credentials, if any, go as HTTP Basic auth.
    """

    def __init__(
        self,
        base_url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout_s: float = HTTP_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        self._auth: str | None = None
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self._auth = f"Basic {token}"
        self._collection_ready = False

    def describe(self) -> str:
        parts = urllib.parse.urlsplit(self.base_url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))

    def _url(self, name: str) -> str:
        return self.base_url + urllib.parse.quote(_check_name(name))

    def _request(
        self,
        method: str,
        url: str,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201, 204),
    ) -> tuple[int, bytes]:
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        if self._auth:
            req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/octet-stream")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, b""
            exc.close()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TargetUnavailable(
                "archive.target", target=self.describe(), reason=f"{method} failed: {reason}"
            ) from exc
        if status not in ok:
            # a missing pack is a fact about the pack; anything else is about the server
            cls = ArchiveError if status in (404, 410) else TargetUnavailable
            raise cls(
                "archive.target",
                target=self.describe(),
                reason=f"{method} {urllib.parse.urlsplit(url).path} answered HTTP {status}",
            )
        return status, body

    def _ensure_collection(self) -> None:
        if self._collection_ready:
            return
        # MKCOL each missing level; 405 means it exists already
        parts = urllib.parse.urlsplit(self.base_url)
        segments = [s for s in parts.path.split("/") if s]
        path = ""
        for seg in segments:
            path += "/" + seg
            url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + "/", "", ""))
            self._request("MKCOL", url, ok=(200, 201, 204, 301, 405))
        self._collection_ready = True

    def put(self, name: str, data: bytes) -> None:
        self._ensure_collection()
        self._request("PUT", self._url(name), data=data)
        log.debug("uploaded %s (%d bytes) to %s", name, len(data), self.describe())

    def get(self, name: str) -> bytes:
        return self._request("GET", self._url(name))[1]

    def get_range(self, name: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        headers = {"Range": f"bytes={offset}-{offset + length - 1}"}
        status, body = self._request("GET", self._url(name), headers=headers, ok=(200, 206))
        if status == 200:  # the server ignored the range: take our slice of the whole body
            log.warning("%s ignored a range request; fetched the whole pack", self.describe())
            return body[offset : offset + length]
        return body

    def delete(self, name: str) -> None:
        self._request("DELETE", self._url(name), ok=(200, 204, 404))


def target_from(
    spec: str, *, username: str | None = None, password: str | None = None
) -> ColdTarget:
    """``http(s)://…`` → WebDAV; anything else → a directory."""
    if spec.startswith(("http://", "https://")):
        return WebDavTarget(spec, username=username, password=password)
    return DirectoryTarget(Path(spec).expanduser())
