"""The committed ``protos/*_pb2*`` modules are exactly what grpcio-tools makes of mesh.proto."""

from __future__ import annotations

from pathlib import Path

import pytest

from protos.generate import PROTO_FILES, ROOT, generate

GENERATED = tuple(
    f"{Path(proto).stem}{suffix}"
    for proto in PROTO_FILES
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("protos")
    generate(out)
    return out / "protos"


@pytest.mark.parametrize("name", GENERATED)
def test_committed_module_matches_regenerated(regenerated: Path, name: str) -> None:
    fresh = regenerated / name
    committed = ROOT / "protos" / name
    assert fresh.is_file(), f"protoc did not write {name}"
    assert committed.is_file(), f"protos/{name} is not committed: run `python -m protos.generate`"
    assert fresh.read_bytes() == committed.read_bytes(), (
        f"protos/{name} is stale or hand-edited: it differs from what grpcio-tools generates "
        "from its .proto; run `python -m protos.generate` and commit the result"
    )


def test_generator_writes_nothing_else(regenerated: Path) -> None:
    # every generated module is checked above: a new .proto needs its files listed here
    assert sorted(p.name for p in regenerated.iterdir()) == sorted(GENERATED)
