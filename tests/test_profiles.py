"""Device profiles: the built-in YAML files, the schema, the rules and the error messages."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from provisioning.errors import ProvisioningError
from provisioning.profiles import (
    MODELS,
    ROLES,
    SCOPES,
    Profile,
    builtin_dir,
    dump_profile,
    known_profiles,
    load_profile,
    parse_profile,
)

BUILTINS = ["glasses", "hub", "mac", "phone", "watch"]


def write(folder: Path, text: str, name: str = "custom.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def phone_raw() -> dict[str, Any]:
    return copy.deepcopy(load_profile("phone").raw)


def refused(
    data: object, *, field: str, file: str = "custom.yaml", key: str = "profile.invalid"
) -> ProvisioningError:
    with pytest.raises(ProvisioningError) as info:
        parse_profile(data, file=file)
    error = info.value
    assert error.key == key
    assert error.fields["file"] == file
    assert error.fields["field"] == field, str(error)
    assert_one_line(error)
    return error


def assert_one_line(error: ProvisioningError) -> None:
    text = str(error)
    assert text and len(text.splitlines()) == 1, text


# --------------------------------------------------------------------------- built-ins


def test_known_profiles_are_the_five_builtins() -> None:
    assert known_profiles() == BUILTINS
    assert all((builtin_dir() / f"{name}.yaml").is_file() for name in BUILTINS)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_loads_by_name_and_by_path_and_is_named_after_its_file(name: str) -> None:
    by_name = load_profile(name)
    by_path = load_profile(builtin_dir() / f"{name}.yaml")
    by_str_path = load_profile(str(builtin_dir() / f"{name}.yaml"))
    assert isinstance(by_name, Profile)
    assert by_name.name == name
    assert by_name == by_path == by_str_path
    assert by_name.description.strip()
    assert by_name.raw["schema_version"] == 1


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_passes_the_json_schema_on_its_own(name: str) -> None:
    schema = json.loads((builtin_dir().parent / "profile.schema.json").read_text("utf-8"))
    Draft202012Validator.check_schema(schema)
    data = yaml.safe_load((builtin_dir() / f"{name}.yaml").read_text("utf-8"))
    assert list(Draft202012Validator(schema).iter_errors(data)) == []


def test_schema_closed_sets_match_the_module() -> None:
    schema = json.loads((builtin_dir().parent / "profile.schema.json").read_text("utf-8"))
    props = schema["properties"]
    assert set(props["roles"]["items"]["enum"]) == ROLES
    assert set(props["models"]["items"]["enum"]) == MODELS
    assert set(props["scopes"]["items"]["enum"]) == SCOPES


def test_glasses() -> None:
    p = load_profile("glasses")
    assert {"capture_audio", "wake_word", "voiceprint", "camera", "hud", "speaker"} <= p.roles
    assert p.channel == "glasses"
    assert {"vad", "wake", "speaker"} <= set(p.models)
    assert {"utter", "ack"} <= set(p.scopes)
    assert not {"approve", "execute", "relay"} & set(p.scopes)
    assert p.relay_via is None


def test_mac_is_the_executor() -> None:
    p = load_profile("mac")
    assert p.has("executor") and p.has("capture_audio")
    assert not p.has("confirm_cards")
    assert p.channel == "mac"
    assert "execute" in p.scopes
    assert "approve" not in p.scopes
    assert p.storage == "full" and p.window_days is None


def test_phone_answers_cards_and_relays() -> None:
    p = load_profile("phone")
    assert p.has("confirm_cards") and p.has("relay") and p.has("voiceprint")
    assert {"approve", "relay", "utter", "ack"} <= set(p.scopes)
    assert "execute" not in p.scopes
    assert p.channel == "phone_app"
    assert p.relay_via is None


def test_watch_relays_via_phone_and_keeps_a_window() -> None:
    p = load_profile("watch")
    assert p.relay_via == "phone"
    assert p.storage == "window"
    assert isinstance(p.window_days, int) and 1 <= p.window_days <= 30
    assert p.has("capture_audio")
    assert p.channel == "watch"
    assert not {"approve", "execute", "relay"} & set(p.scopes)


def test_hub_captures_nothing() -> None:
    p = load_profile("hub")
    assert p.has("hub")
    assert p.channel is None
    assert not p.roles & {"capture_audio", "wake_word", "voiceprint", "camera", "confirm_cards"}
    assert not {"approve", "execute", "relay", "utter"} & set(p.scopes)
    assert p.storage == "full" and p.relay_via is None


def test_only_phone_approves_only_mac_executes_only_hub_is_hub() -> None:
    profiles = {name: load_profile(name) for name in BUILTINS}
    assert [n for n, p in profiles.items() if "approve" in p.scopes] == ["phone"]
    assert [n for n, p in profiles.items() if "execute" in p.scopes] == ["mac"]
    assert [n for n, p in profiles.items() if p.has("hub")] == ["hub"]
    channels = [p.channel for p in profiles.values() if p.channel is not None]
    assert len(channels) == len(set(channels)) == 4


def test_has_rejects_a_role_outside_the_closed_set() -> None:
    with pytest.raises(ValueError):
        load_profile("phone").has("screen")


@pytest.mark.parametrize("name", BUILTINS)
def test_dump_round_trips(name: str, tmp_path: Path) -> None:
    profile = load_profile(name)
    text = dump_profile(profile)
    assert parse_profile(yaml.safe_load(text), file="dumped") == profile
    assert load_profile(write(tmp_path, text, f"{name}.yaml")).raw == profile.raw


def test_raw_is_a_copy_of_the_input() -> None:
    data = phone_raw()
    profile = parse_profile(data, file="x")
    data["roles"].append("camera")
    assert "camera" not in profile.raw["roles"]
    assert profile.raw == load_profile("phone").raw


def test_a_custom_profile_relaying_via_a_builtin_loads(tmp_path: Path) -> None:
    raw = copy.deepcopy(load_profile("watch").raw)
    raw["name"] = "ring"
    raw["channel"] = "ring"
    path = write(tmp_path, yaml.safe_dump(raw), "ring.yaml")
    assert load_profile(path).relay_via == "phone"


# --------------------------------------------------------------------------- unknown


def test_unknown_builtin_name_lists_the_known_ones() -> None:
    with pytest.raises(ProvisioningError) as info:
        load_profile("toaster")
    assert info.value.key == "profile.unknown"
    assert_one_line(info.value)
    for name in BUILTINS:
        assert name in str(info.value)


@pytest.mark.parametrize("name", ["", "profiles", "glasses.", "Glasses", "phone "])
def test_a_name_is_built_in_only_as_known_profiles_lists_it(name: str) -> None:
    # a built-in is found by one lookup of its file, not by listing the folder: the same
    # names must be known (a stem exactly; no empty name, no near-miss spelling)
    assert name not in known_profiles()
    with pytest.raises(ProvisioningError) as info:
        load_profile(name)
    assert info.value.key == "profile.unknown"
    assert all(known in str(info.value) for known in BUILTINS)


def test_missing_file_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(ProvisioningError) as info:
        load_profile(tmp_path / "nope.yaml")
    assert info.value.key == "profile.unknown"
    assert "nope.yaml" in str(info.value)
    assert_one_line(info.value)


# --------------------------------------------------------------------------- bad files

PHONE = (Path(__file__).resolve().parent.parent / "provisioning/profiles/phone.yaml").read_text(
    "utf-8"
)


def phone_text(**replace: str) -> str:
    """phone.yaml with whole lines replaced: ``{"name: phone": "name: x"}``-style edits."""
    text = PHONE
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


BAD_FILES: list[tuple[str, str, str]] = [
    # (case, YAML text, expected field)
    ("missing field", phone_text(**{"name: phone\n": ""}), "name"),
    (
        "unknown role",
        phone_text(**{"confirm_cards, relay]": "confirm_cards, relay, laser]"}),
        "roles[6]",
    ),
    ("unknown top-level key", PHONE + "colour: red\n", "colour"),
    ("wrong type", phone_text(**{"channel: phone_app": "channel: [phone_app]"}), "channel"),
    (
        "wrong nested type",
        phone_text(**{"mode: full": "mode: full\n  window_days: x"}),
        "storage.window_days",
    ),
    (
        "wake_word without capture_audio",
        phone_text(**{"roles: [capture_audio, wake_word,": "roles: [wake_word,"}),
        "roles[0]",
    ),
    (
        "confirm_cards without approve",
        phone_text(**{"notes.write, approve, relay]": "notes.write, relay]"}),
        "roles[4]",
    ),
    (
        "approve without confirm_cards",
        phone_text(**{"speaker, confirm_cards, relay]": "speaker, relay]"}),
        "scopes[5]",
    ),
    (
        "window_days with full storage",
        phone_text(**{"mode: full": "mode: full\n  window_days: 3"}),
        "storage.window_days",
    ),
    ("duplicate list item", phone_text(**{"models: [vad,": "models: [vad, vad,"}), "models[1]"),
    (
        "YAML syntax error",
        phone_text(**{"models: [vad, wake, speaker]": "models: [vad, wake"}),
        "<document>",
    ),
    ("duplicate key", PHONE + "name: phone\n", "<document>"),
    ("not a mapping", "- glasses\n- phone\n", "<document>"),
    ("a scalar", "phone\n", "<document>"),
    ("empty file", "", "<document>"),
    ("only a comment", "# nothing here\n", "<document>"),
]


@pytest.mark.parametrize(("case", "text", "field"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_file_is_refused_naming_file_and_field(
    case: str, text: str, field: str, tmp_path: Path
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProvisioningError) as info:
        load_profile(path)
    error = info.value
    assert error.key == "profile.invalid"
    assert error.fields["file"] == str(path)
    assert error.fields["field"] == field, str(error)
    assert error.fields["reason"]
    assert_one_line(error)
    assert str(path) in str(error) and field in str(error)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "schema_version: 1\nname: phone\nroles: [capture_audio\n")
    with pytest.raises(ProvisioningError) as info:
        load_profile(path)
    assert "line 4" in info.value.fields["reason"]


def test_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ProvisioningError) as info:
        load_profile(path)
    assert info.value.fields["field"] == "<document>"


@pytest.mark.parametrize(
    "text", ["!!int \n", "!!int abc\n", "!!float \n", "!!binary x\n", "day: 2024-02-30\n"]
)
def test_values_pyyaml_cannot_construct_are_refused(text: str, tmp_path: Path) -> None:
    with pytest.raises(ProvisioningError) as info:
        load_profile(write(tmp_path, text))
    assert info.value.fields["field"] == "<document>"
    assert_one_line(info.value)


def test_aliases_and_python_tags_are_refused(tmp_path: Path) -> None:
    for text in ("a: &x [1]\nb: *x\n", "name: !!python/object/apply:os.getcwd []\n"):
        with pytest.raises(ProvisioningError) as info:
            load_profile(write(tmp_path, text))
        assert info.value.fields["field"] == "<document>"


# --------------------------------------------------------------------------- rules


def edited(**changes: Any) -> dict[str, Any]:
    raw = phone_raw()
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (edited(schema_version=2), "schema_version"),
        (edited(schema_version=True), "schema_version"),
        (edited(name="Phone"), "name"),
        (edited(name="phone\n"), "name"),
        (edited(description=" "), "description"),
        (edited(roles=[]), "roles"),
        (edited(scopes=[]), "scopes"),
        (edited(models=["vad", "wake", "speaker", "gpt"]), "models[3]"),
        (edited(scopes=["utter", "ack", "root"]), "scopes[2]"),
        (edited(storage={"mode": "cloud"}), "storage.mode"),
        (edited(storage={}), "storage.mode"),
        (edited(storage={"mode": "window"}), "storage.window_days"),
        (edited(storage={"mode": "window", "window_days": 0}), "storage.window_days"),
        (edited(storage={"mode": "full", "size": 1}), "storage.size"),
        (edited(audio={"sample_rate": 44100, "channels": 1}), "audio.sample_rate"),
        (edited(audio={"sample_rate": 16000}), "audio.channels"),
        (edited(**{"weird key": 1}), "['weird key']"),
        # R2: capture_audio needs a channel; no channel (nor audio) without it
        (edited(channel=None), "channel"),
        (
            edited(
                roles=["speaker", "confirm_cards", "relay"],
                models=[],
                audio=None,
            ),
            "channel",
        ),
        # R3: roles need their models
        (edited(models=["vad", "speaker"]), "roles[1]"),
        (edited(models=["wake", "speaker"]), "roles[0]"),
        # R4: capture needs utter; speaker needs ack
        (edited(scopes=["ack", "timeline.read", "approve", "relay"]), "roles[0]"),
        (edited(scopes=["utter", "timeline.read", "approve", "relay"]), "roles[3]"),
        # R5: executor ⇔ execute, relay ⇔ relay
        (edited(scopes=["utter", "ack", "approve", "relay", "execute"]), "scopes[4]"),
        (
            edited(roles=["capture_audio", "speaker", "confirm_cards", "executor", "relay"]),
            "roles[3]",
        ),
        (edited(scopes=["utter", "ack", "approve"]), "roles[5]"),
        # R6
        (edited(scopes=["utter", "ack", "timeline.write", "approve", "relay"]), "scopes[2]"),
        # R7: the hub role is the hub's, and the hub captures nothing
        (edited(roles=[*phone_raw()["roles"], "hub"]), "roles[6]"),
        (edited(name="hub"), "roles"),
        # R8: relay_via
        (edited(relay_via="phone"), "relay_via"),
        (edited(relay_via="mac"), "relay_via"),
        (edited(relay_via="Mac"), "relay_via"),
    ],
)
def test_rule_violations_name_the_field(data: dict[str, Any], field: str) -> None:
    refused(data, field=field)


def test_hub_may_not_capture() -> None:
    raw = copy.deepcopy(load_profile("hub").raw)
    raw["roles"] = ["hub", "camera"]
    refused(raw, field="roles[1]")
    raw = copy.deepcopy(load_profile("hub").raw)
    raw["storage"] = {"mode": "window", "window_days": 3}
    refused(raw, field="storage.mode")


def test_relay_via_must_resolve_to_a_relay(tmp_path: Path) -> None:
    raw = copy.deepcopy(load_profile("watch").raw)
    raw["relay_via"] = "mac"
    with pytest.raises(ProvisioningError) as info:
        load_profile(write(tmp_path, yaml.safe_dump(raw)))
    assert info.value.fields["field"] == "relay_via"
    raw["relay_via"] = "pager"
    with pytest.raises(ProvisioningError) as info:
        load_profile(write(tmp_path, yaml.safe_dump(raw)))
    assert info.value.fields["field"] == "relay_via"
    assert "pager" in str(info.value)


def test_relay_via_prefers_a_sibling_file(tmp_path: Path) -> None:
    bridge = phone_raw()
    bridge["name"] = "bridge"
    write(tmp_path, yaml.safe_dump(bridge), "bridge.yaml")
    raw = copy.deepcopy(load_profile("watch").raw)
    raw["relay_via"] = "bridge"
    assert load_profile(write(tmp_path, yaml.safe_dump(raw))).relay_via == "bridge"


def test_the_first_problem_is_an_unknown_key_before_a_missing_one() -> None:
    raw = phone_raw()
    raw["rols"] = raw.pop("roles")
    error = refused(raw, field="rols")
    assert "unknown" in error.fields["reason"]


def test_a_key_with_a_line_break_keeps_the_message_on_one_line() -> None:
    error = refused(edited(**{"a\nb\u2028c": 1}), field="['a\\nb\\u2028c']")
    assert "\n" not in str(error)


# --------------------------------------------------------------------------- fuzzing

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(sorted(ROLES | MODELS | SCOPES | {"full", "window", "phone", "hub"})),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(["name", "roles", "mode", "window_days", "x"]) | st.text(max_size=8),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)
FIELDS = [
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
    "extra",
]


def only_provisioning_errors(data: object) -> None:
    try:
        profile = parse_profile(data, file="fuzz.yaml")
    except ProvisioningError as error:
        assert error.key == "profile.invalid"
        assert_one_line(error)
    else:
        assert parse_profile(yaml.safe_load(dump_profile(profile)), file="again") == profile


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_json_values_raise_only_provisioning_errors(data: object) -> None:
    only_provisioning_errors(data)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(BUILTINS),
    st.dictionaries(st.sampled_from(FIELDS), json_values | st.none(), max_size=3),
    st.sets(st.sampled_from(FIELDS), max_size=2),
)
def test_mutated_builtins_raise_only_provisioning_errors(
    name: str, changes: dict[str, object], dropped: set[str]
) -> None:
    raw: dict[str, object] = copy.deepcopy(load_profile(name).raw)
    raw.update(changes)
    for key in dropped:
        raw.pop(key, None)
    only_provisioning_errors(raw)


yaml_ish = st.lists(
    st.sampled_from(
        [
            "name: phone\n",
            "roles: [capture_audio, wake_word]\n",
            "- ",
            ": ",
            "  ",
            "\n",
            "\t",
            "[",
            "]",
            "{",
            "}",
            ",",
            "&a ",
            "*a ",
            "!!int ",
            "!!binary ",
            "!!python/name:os.system ",
            "2024-02-30",
            '"',
            "'",
            "|\n",
            ">\n",
            "---\n",
            "...\n",
            "#",
            "? ",
            "<<: ",
            "%YAML 1.1\n",
            "\x00",
            "\ufeff",
            "é",
        ]
    )
    | st.text(max_size=6),
    max_size=25,
).map("".join)


phone_mutations = st.tuples(
    st.integers(0, len(PHONE)), st.integers(0, 40), st.text(max_size=10) | yaml_ish
).map(lambda cut: PHONE[: cut[0]] + cut[2] + PHONE[cut[0] + cut[1] :])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(yaml_ish, st.text(max_size=200), phone_mutations))
def test_arbitrary_yaml_text_raises_only_provisioning_errors(
    text: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_profile(path)
    except ProvisioningError as error:
        assert error.key == "profile.invalid"
        assert error.fields["file"] == str(path)
        assert_one_line(error)
