#!/usr/bin/env python3
"""Regenerates the checked-in gRPC code of the sandboxd Python client.

    python clients/python/regen.py          # rewrite sandboxd/v1/sandbox_pb2*.py(i)
    python clients/python/regen.py --check  # exit 1, naming the files, if they are stale

Runs grpcio-tools, at exactly the version pinned in requirements-dev.txt, as

    python -m grpc_tools.protoc -I proto --python_out=... --pyi_out=... \\
        --grpc_python_out=... sandboxd/v1/sandbox.proto

from the repository root, so `from sandboxd.v1 import sandbox_pb2` in the
generated code resolves inside this package.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROTO = "sandboxd/v1/sandbox.proto"
GENERATED = (
    "sandboxd/v1/sandbox_pb2.py",
    "sandboxd/v1/sandbox_pb2.pyi",
    "sandboxd/v1/sandbox_pb2_grpc.py",
)
COMMAND = "python clients/python/regen.py"


def pinned_version() -> str:
    """The grpcio-tools version pinned in requirements-dev.txt."""
    text = (HERE / "requirements-dev.txt").read_text()
    m = re.search(r"^grpcio-tools==(\S+)\s*$", text, re.MULTILINE)
    if not m:
        raise SystemExit("requirements-dev.txt pins no grpcio-tools==VERSION")
    return m.group(1)


def check_tools() -> None:
    """Fails unless the pinned grpcio-tools is the one installed."""
    want = pinned_version()
    try:
        have = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != want:
        raise SystemExit(
            f"grpcio-tools {want} is needed (installed: {have or 'none'}); "
            f"run `pip install -r clients/python/requirements-dev.txt`"
        )


def generate(out_dir: Path) -> list[Path]:
    """Generates the code into out_dir (as out_dir/sandboxd/v1/...)."""
    check_tools()
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-I",
        "proto",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        PROTO,
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"protoc failed ({done.returncode}):\n{done.stderr}")
    return [out_dir / name for name in GENERATED]


def stale_files() -> list[str]:
    """Checked-in generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory(prefix="sandboxd-regen-") as tmp:
        generate(Path(tmp))
        stale = []
        for name in GENERATED:
            checked_in = HERE / name
            fresh = Path(tmp) / name
            if not checked_in.exists() or not filecmp.cmp(checked_in, fresh, shallow=False):
                stale.append(f"clients/python/{name}")
        return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        if stale:
            print(f"stale generated code: {', '.join(stale)}; run `{COMMAND}`")
            return 1
        print("generated code is up to date")
        return 0
    for path in generate(HERE):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
