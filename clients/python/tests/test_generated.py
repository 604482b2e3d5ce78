"""The checked-in generated code matches proto/sandboxd/v1/sandbox.proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[1]


def _regen():
    spec = importlib.util.spec_from_file_location("sandboxd_regen", CLIENT / "regen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_up_to_date() -> None:
    regen = _regen()
    try:
        stale = regen.stale_files()
    except SystemExit as e:  # the pinned grpcio-tools is missing, or protoc failed
        pytest.fail(str(e), pytrace=False)
    assert not stale, (
        f"stale generated code: {', '.join(stale)} differ from what grpcio-tools "
        f"{regen.pinned_version()} makes of proto/sandboxd/v1/sandbox.proto; run `{regen.COMMAND}`"
    )


def test_generated_code_imports_inside_the_package() -> None:
    from sandboxd.v1 import sandbox_pb2, sandbox_pb2_grpc

    assert sandbox_pb2.DESCRIPTOR.package == "sandboxd.v1"
    assert hasattr(sandbox_pb2_grpc, "SandboxStub")
