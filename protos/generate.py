"""Regenerate the committed ``*_pb2`` modules from ``protos/*.proto``.

Run: ``python -m protos.generate [OUT_DIR]`` (default: the repository root, in place).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_FILES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "protos").glob("*.proto"))


def generate(out_dir: Path) -> None:
    """Run grpcio-tools' protoc; writes ``protos/<name>_pb2{,_grpc}.py{,i}`` under ``out_dir``."""
    import grpc_tools
    from grpc_tools import protoc

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *PROTO_FILES,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
