"""Device profiles: what each kind of device does in the mesh, as YAML.

A profile is a YAML mapping (see ``profiles/*.yaml`` for the built-in ones and
``profile.schema.json`` for the field-by-field format). It is checked in two steps:

1. **Schema** (``profile.schema.json``, JSON Schema draft 2020-12): field types, the closed
   sets of roles, models and scopes, no duplicates in a list, no unknown keys at any level,
   ``schema_version: 1``, ``storage.mode`` in ``full``/``window``, the 16 kHz mono
   ``audio`` block.
2. **Rules** (below, checked here because they link fields):

   - R1  ``wake_word`` and ``voiceprint`` need ``capture_audio`` (no audio, nothing to hear).
   - R2  ``capture_audio`` needs a ``channel`` (voiceprints are enrolled per channel);
         without ``capture_audio`` the ``channel`` is null or absent, and so is ``audio``.
   - R3  a role needs its model: ``capture_audio`` → ``vad``, ``wake_word`` → ``wake``,
         ``voiceprint`` → ``speaker``.
   - R4  ``capture_audio`` needs the ``utter`` scope (what it hears must reach the hub);
         ``hud`` or ``speaker`` need ``ack`` (only acknowledged replies count as said).
   - R5  role ⇔ scope, both ways: ``confirm_cards`` ⇔ ``approve``, ``executor`` ⇔
         ``execute``, ``relay`` ⇔ ``relay``.
   - R6  ``timeline.write`` needs ``timeline.read`` (a replica is merged before it is
         written).
   - R7  the ``hub`` role is held by the profile named ``hub`` and only by it; the hub
         captures nothing and neither approves, executes nor relays (no ``capture_audio``,
         ``wake_word``, ``voiceprint``, ``camera``, ``confirm_cards``, ``executor``,
         ``relay``); it keeps ``storage.mode: full`` and has no ``relay_via``.
   - R8  ``relay_via`` names another profile, not itself, and not from a profile that is a
         relay itself (no relay chains). :func:`load_profile` also resolves it — to
         ``<name>.yaml`` next to the file, else the built-in profile — and requires that
         profile to hold the ``relay`` role.
   - R9  ``storage.window_days`` is required with ``mode: window`` and refused with
         ``mode: full``.
   - R11 ``approve.gesture`` (a nod or shake answering a card shown on the HUD, for the
         effects the hub lets glasses answer) needs the ``hud`` role.
   - R10 ``name``, ``channel`` and ``relay_via`` match their patterns in full (no trailing
         newline) and ``description`` is not blank.

Every problem raises :class:`~provisioning.errors.ProvisioningError` with key
``profile.invalid`` and fields ``file``, ``field`` (a path such as ``roles[2]`` or
``storage.window_days``; ``<document>`` for the file as a whole) and ``reason``; its text is
one line. An unknown built-in name or a missing file raises ``profile.unknown``. YAML is read
with a ``yaml.SafeLoader`` subclass that also refuses duplicate keys and aliases (``*name``).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from provisioning.errors import ProvisioningError

SCHEMA_VERSION = 1
HUB_PROFILE = "hub"
DOCUMENT = "<document>"
"""the ``field`` of an error about the file as a whole"""

ROLES: frozenset[str] = frozenset(
    {
        "capture_audio",
        "wake_word",
        "voiceprint",
        "camera",
        "hud",
        "speaker",
        "confirm_cards",
        "executor",
        "relay",
        "hub",
    }
)
MODELS: frozenset[str] = frozenset({"vad", "wake", "speaker", "asr", "embed", "face"})
SCOPES: frozenset[str] = frozenset(
    {
        "utter",
        "ack",
        "timeline.read",
        "timeline.write",
        "notes.write",
        "approve",
        "approve.gesture",
        "execute",
        "relay",
    }
)
STORAGE_MODES: frozenset[str] = frozenset({"full", "window"})
CAPTURE_ROLES: frozenset[str] = frozenset({"capture_audio", "wake_word", "voiceprint", "camera"})
HUB_EXCLUDED_ROLES: frozenset[str] = CAPTURE_ROLES | {"confirm_cards", "executor", "relay"}

_ROLE_NEEDS_ROLE: dict[str, str] = {"wake_word": "capture_audio", "voiceprint": "capture_audio"}
_ROLE_NEEDS_MODEL: dict[str, str] = {
    "capture_audio": "vad",
    "wake_word": "wake",
    "voiceprint": "speaker",
}
_ROLE_NEEDS_SCOPE: dict[str, str] = {"capture_audio": "utter", "hud": "ack", "speaker": "ack"}
_ROLE_IFF_SCOPE: dict[str, str] = {
    "confirm_cards": "approve",
    "executor": "execute",
    "relay": "relay",
}
_FIELD_ORDER = (
    "schema_version",
    "name",
    "description",
    "roles",
    "channel",
    "models",
    "scopes",
    "relay_via",
    "storage",
    "audio",
)
_PROFILE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_CHANNEL_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SUFFIXES = (".yaml", ".yml")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_REPR_LIMIT = 60

PathPart = object


@dataclass(frozen=True)
class Profile:
    """A validated device profile; ``raw`` is the canonical mapping to copy into a bundle."""

    name: str
    description: str
    roles: frozenset[str]
    channel: str | None
    models: tuple[str, ...]
    scopes: tuple[str, ...]
    relay_via: str | None
    storage: str
    window_days: int | None
    raw: dict[str, Any] = field(compare=False, repr=False)

    def has(self, role: str) -> bool:
        """Whether the profile holds ``role``; a name outside the closed set is a bug."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles are {', '.join(sorted(ROLES))}")
        return role in self.roles


# --------------------------------------------------------------------------- public API


@functools.cache
def builtin_dir() -> Path:
    """The folder holding the built-in profiles (``<name>.yaml``), resolved once: a hub
    looks up its devices' profiles on hot paths (audit witnesses, HUDs)."""
    return Path(__file__).resolve().parent / "profiles"


def _builtin(name: str) -> Path | None:
    """The built-in profile file of ``name`` (a name :func:`known_profiles` lists), if there
    is one: one ``stat``, not a listing of the folder."""
    path = builtin_dir() / f"{name}.yaml"
    return path if name and path.stem == name and path.is_file() else None


def known_profiles() -> list[str]:
    """Names of the built-in profiles, sorted."""
    folder = builtin_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.iterdir() if p.suffix == ".yaml" and p.is_file())


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a built-in profile by name, or a profile from a YAML file path.

    A ``str`` is a path when it contains a path separator or ends in ``.yaml``/``.yml``;
    otherwise it is a built-in name. ``relay_via`` is resolved (rule R8).
    """
    path = _locate(name_or_path)
    profile = _load_file(path)
    _check_relay_target(profile, path)
    return profile


def parse_profile(data: object, *, file: str) -> Profile:
    """Validate an already-parsed mapping (schema, then rules R1–R10) into a Profile.

    ``file`` names the source in error messages. ``relay_via`` is checked for shape only;
    :func:`load_profile` resolves it.
    """
    if data is None:
        raise _invalid(file, DOCUMENT, "the profile is empty; expected a mapping of fields")
    if not isinstance(data, dict):
        raise _invalid(file, DOCUMENT, f"expected a mapping of fields, got {_kind(data)}")
    errors = list(_validator().iter_errors(data))
    if errors:
        error = min(errors, key=_error_rank)
        parts, reason = _describe(error)
        raise _invalid(file, _format_path(parts), reason)
    raw = _canonical(data)
    _check_rules(raw, file)
    storage: dict[str, Any] = raw["storage"]
    return Profile(
        name=raw["name"],
        description=raw["description"],
        roles=frozenset(raw["roles"]),
        channel=raw.get("channel"),
        models=tuple(raw["models"]),
        scopes=tuple(raw["scopes"]),
        relay_via=raw.get("relay_via"),
        storage=storage["mode"],
        window_days=storage.get("window_days"),
        raw=raw,
    )


def dump_profile(profile: Profile) -> str:
    """The profile as YAML text, fields in canonical order; it loads back to an equal one."""
    data = {key: profile.raw[key] for key in _FIELD_ORDER if key in profile.raw}
    return yaml.safe_dump(
        data, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
    )


# --------------------------------------------------------------------------- loading


def _locate(name_or_path: str | Path) -> Path:
    if isinstance(name_or_path, Path) or _looks_like_path(name_or_path):
        path = Path(name_or_path)
        if not path.exists():
            raise ProvisioningError(
                "profile.unknown",
                name=str(path),
                file=str(path),
                known=", ".join(known_profiles()) or "(none)",
            )
        return path
    path_of = _builtin(name_or_path)
    if path_of is None:
        raise ProvisioningError(
            "profile.unknown", name=name_or_path, known=", ".join(known_profiles()) or "(none)"
        )
    return path_of


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.endswith(_SUFFIXES) or text in {".", ".."}


_LOADED: dict[str, tuple[tuple[int, int, int, int], Profile]] = {}
"""profiles already read, by file, with the file's (device, inode, size, mtime_ns) then: a
hub asks for a device's profile on hot paths (audit witnesses, HUDs), and parsing the YAML
and checking the schema costs milliseconds; a changed file is read again"""
_LOADED_MAX = 256


def _load_file(path: Path) -> Profile:
    file = str(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise _invalid(file, DOCUMENT, f"cannot read the file: {exc.strerror or exc}") from None
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _LOADED.get(file)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise _invalid(file, DOCUMENT, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _invalid(file, DOCUMENT, f"not UTF-8 text (byte {exc.start})") from None
    profile = parse_profile(_parse_yaml(text, file), file=file)
    if len(_LOADED) >= _LOADED_MAX:
        _LOADED.clear()
    _LOADED[file] = (stamp, profile)
    return profile


def _parse_yaml(text: str, file: str) -> object:
    try:
        # a yaml.SafeLoader subclass: as safe as yaml.safe_load, stricter about keys
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        raise _invalid(file, DOCUMENT, _yaml_reason(exc)) from None
    except yaml.YAMLError as exc:
        raise _invalid(file, DOCUMENT, f"YAML error: {exc}") from None
    except RecursionError:
        raise _invalid(file, DOCUMENT, "YAML nesting is too deep") from None
    except Exception as exc:
        # PyYAML's constructors raise plain exceptions on some odd values: ValueError for a
        # timestamp such as 2024-02-30, IndexError for an empty '!!int', ...
        raise _invalid(file, DOCUMENT, f"YAML value cannot be read: {exc!r}") from None


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "syntax error"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    syntax = isinstance(exc, yaml.scanner.ScannerError | yaml.parser.ParserError)
    return f"YAML {'syntax ' if syntax else ''}error{where}: {problem}"


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and a key given twice in one mapping.

    Profiles need no anchors; refusing aliases also keeps an alias bomb from blowing up.
    """

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a profile", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, Hashable):
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {_short(key)}", key_node.start_mark
                        )
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_relay_target(profile: Profile, path: Path) -> None:
    if profile.relay_via is None:
        return
    file = str(path)
    sibling = path.parent / f"{profile.relay_via}.yaml"
    builtin = _builtin(profile.relay_via)
    if sibling.is_file():
        target_path = sibling
    elif builtin is not None:
        target_path = builtin
    else:
        raise _invalid(
            file,
            "relay_via",
            f"no profile named {profile.relay_via!r} next to this file or built in",
        )
    target = _load_file(target_path)
    if target.name != profile.relay_via:
        raise _invalid(
            file, "relay_via", f"{target_path} holds profile {target.name!r}, not the one named"
        )
    if not target.has("relay"):
        raise _invalid(file, "relay_via", f"profile {target.name!r} does not hold the 'relay' role")


# --------------------------------------------------------------------------- schema


@functools.cache
def _schema() -> dict[str, Any]:
    text = resources.files("provisioning").joinpath("profile.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(_schema())


_RANK = {"additionalProperties": 0, "required": 1, "type": 2}


def _error_rank(error: ValidationError) -> tuple[int, int]:
    """Shallowest first; at one depth an unknown key (often a typo) before a missing one."""
    return (len(error.absolute_path), _RANK.get(str(error.validator), 3))


def _describe(error: ValidationError) -> tuple[list[PathPart], str]:
    """The path and a short one-line reason for a schema error."""
    parts: list[PathPart] = list(error.absolute_path)
    kind = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    if kind == "required" and isinstance(instance, Mapping):
        missing = [key for key in value if key not in instance]
        return [*parts, missing[0]], "required field is missing"
    if kind == "additionalProperties" and isinstance(instance, Mapping):
        allowed = list(error.schema.get("properties", {}))
        extra = [key for key in instance if key not in allowed]
        return [*parts, extra[0]], f"unknown field; allowed: {', '.join(allowed)}"
    if kind == "type":
        return parts, f"expected {_type_words(value)}, got {_kind(instance)}"
    if kind == "enum":
        return parts, f"{_short(instance)} is not one of: {', '.join(map(str, value))}"
    if kind == "const":
        return parts, f"must be {json.dumps(value)}, got {_short(instance)}"
    if kind == "uniqueItems" and isinstance(instance, Sequence):
        index = _first_duplicate(instance)
        return [*parts, index], f"{_short(instance[index])} is listed twice"
    if kind == "minItems":
        return parts, "must list at least one item"
    if kind == "minimum":
        return parts, f"must be at least {value}, got {_short(instance)}"
    if kind == "maximum":
        return parts, f"must be at most {value}, got {_short(instance)}"
    if kind == "minLength":
        return parts, "must not be empty"
    if kind == "maxLength":
        return parts, f"must be at most {value} characters"
    if kind == "pattern":
        hint = error.schema.get("description", "")
        return parts, f"{_short(instance)} is not a valid name: {_pattern_hint(hint, value)}"
    return parts, str(error.message)


def _pattern_hint(description: str, pattern: str) -> str:
    # the last sentence of the schema's description spells the pattern out
    sentences = [s.strip() for s in description.split(". ") if s.strip()]
    return sentences[-1].rstrip(".") if sentences else f"must match {pattern}"


def _first_duplicate(items: Sequence[Any]) -> int:
    for index, item in enumerate(items):
        if any(_same(item, earlier) for earlier in items[:index]):
            return index
    return 0


def _same(a: object, b: object) -> bool:
    return (type(a) is type(b) and a == b) or (_is_number(a) and _is_number(b) and a == b)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_words(expected: str | list[str]) -> str:
    names = [expected] if isinstance(expected, str) else list(expected)
    words = {"object": "a mapping", "array": "a list", "integer": "an integer"}
    return " or ".join(words.get(n, "null" if n == "null" else f"a {n}") for n in names)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------- rules


def _canonical(data: Mapping[Any, Any]) -> dict[str, Any]:
    """A schema-valid mapping in field order, deep-copied, integral numbers as ``int``."""
    raw: dict[str, Any] = {key: copy.deepcopy(data[key]) for key in _FIELD_ORDER if key in data}
    raw["schema_version"] = int(raw["schema_version"])
    storage = raw["storage"]
    if "window_days" in storage:
        storage["window_days"] = int(storage["window_days"])
    if "audio" in raw:
        raw["audio"] = {k: int(v) for k, v in raw["audio"].items()}
    return raw


def _check_rules(raw: dict[str, Any], file: str) -> None:
    name: str = raw["name"]
    roles: list[str] = raw["roles"]
    models: list[str] = raw["models"]
    scopes: list[str] = raw["scopes"]
    channel: str | None = raw.get("channel")
    relay_via: str | None = raw.get("relay_via")
    storage: dict[str, Any] = raw["storage"]

    def fail(where: str, reason: str) -> ProvisioningError:
        return _invalid(file, where, reason)

    def role_at(role: str) -> str:
        return f"roles[{roles.index(role)}]"

    def scope_at(scope: str) -> str:
        return f"scopes[{scopes.index(scope)}]"

    # R10: shapes the schema's regular expressions let slip (a trailing newline)
    if not _PROFILE_NAME.fullmatch(name):
        raise fail("name", f"{_short(name)} is not a valid name")
    if channel is not None and not _CHANNEL_NAME.fullmatch(channel):
        raise fail("channel", f"{_short(channel)} is not a valid channel name")
    if relay_via is not None and not _PROFILE_NAME.fullmatch(relay_via):
        raise fail("relay_via", f"{_short(relay_via)} is not a valid profile name")
    if not raw["description"].strip():
        raise fail("description", "must not be blank")

    # R1
    for role, needed in _ROLE_NEEDS_ROLE.items():
        if role in roles and needed not in roles:
            raise fail(role_at(role), f"the {role!r} role needs the {needed!r} role")
    # R2
    capture = "capture_audio" in roles
    if capture and channel is None:
        raise fail("channel", "required with the 'capture_audio' role (the voiceprint channel)")
    if not capture and channel is not None:
        raise fail("channel", "must be null or absent without the 'capture_audio' role")
    if not capture and "audio" in raw:
        raise fail("audio", "only with the 'capture_audio' role")
    # R3
    for role, model in _ROLE_NEEDS_MODEL.items():
        if role in roles and model not in models:
            raise fail(role_at(role), f"the {role!r} role needs the {model!r} model")
    # R4
    for role, scope in _ROLE_NEEDS_SCOPE.items():
        if role in roles and scope not in scopes:
            raise fail(role_at(role), f"the {role!r} role needs the {scope!r} scope")
    # R5
    for role, scope in _ROLE_IFF_SCOPE.items():
        if role in roles and scope not in scopes:
            raise fail(role_at(role), f"the {role!r} role needs the {scope!r} scope")
        if scope in scopes and role not in roles:
            raise fail(scope_at(scope), f"the {scope!r} scope is only for the {role!r} role")
    # R11
    if "approve.gesture" in scopes and "hud" not in roles:
        raise fail(scope_at("approve.gesture"), "'approve.gesture' is only for the 'hud' role")
    # R6
    if "timeline.write" in scopes and "timeline.read" not in scopes:
        raise fail(scope_at("timeline.write"), "'timeline.write' needs 'timeline.read'")
    # R7
    if "hub" in roles and name != HUB_PROFILE:
        raise fail(role_at("hub"), f"only the profile named {HUB_PROFILE!r} holds the 'hub' role")
    if name == HUB_PROFILE:
        if "hub" not in roles:
            raise fail("roles", "the hub profile must hold the 'hub' role")
        for role in roles:
            if role in HUB_EXCLUDED_ROLES:
                raise fail(role_at(role), f"the hub may not hold the {role!r} role")
        if storage["mode"] != "full":
            raise fail("storage.mode", "the hub keeps everything: must be 'full'")
        if relay_via is not None:
            raise fail("relay_via", "the hub relays through nobody")
    # R8
    if relay_via is not None:
        if relay_via == name:
            raise fail("relay_via", "a profile cannot relay through itself")
        if "relay" in roles:
            raise fail("relay_via", "a relay cannot itself relay through another profile")
    # R9
    if storage["mode"] == "window" and "window_days" not in storage:
        raise fail("storage.window_days", "required with mode 'window'")
    if storage["mode"] == "full" and "window_days" in storage:
        raise fail("storage.window_days", "only with mode 'window'")


# --------------------------------------------------------------------------- messages


def _invalid(file: str, where: str, reason: str) -> ProvisioningError:
    return ProvisioningError(
        "profile.invalid", file=_one_line(file), field=_one_line(where), reason=_one_line(reason)
    )


def _format_path(parts: Iterable[PathPart]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif isinstance(part, str) and _SIMPLE_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{_short(part)}]"
    return text or DOCUMENT


def _short(value: object) -> str:
    """A one-line ``repr`` of a value, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def _one_line(text: str) -> str:
    return text.translate(_LINE_BREAKS)
