"""Every reason the service can send has its exception class.

The reasons are read from the service's own sources (src/session/failure.rs,
the one table of what callers are told, and README.md "The contract"), so a
reason added there without a class here fails this test by name.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import grpc
import pytest

import sandboxd
from sandboxd._status import decode_status
from sandboxd.errors import BY_REASON, error_class

ROOT = Path(__file__).resolve().parents[3]
FAILURE_RS = ROOT / "src" / "session" / "failure.rs"
README = ROOT / "README.md"

#: Family of each reason: the class a user may catch for the whole group.
FAMILIES = {
    sandboxd.EditRefused: {
        "OLD_STRING_NOT_FOUND", "OLD_STRING_AMBIGUOUS", "EDITS_OVERLAP", "DUPLICATE_OLD_STRING",
        "EMPTY_OLD_STRING", "NO_CHANGE", "NO_EDITS", "STALE_FILE",
    },
    sandboxd.PolicyRefused: {"POLICY_DENIED", "COMMAND_REFUSED", "IMAGE_NOT_ALLOWED"},
    sandboxd.AuthRefused: {"UNAUTHENTICATED"},
    sandboxd.ServiceFault: {"SANDBOX_UNAVAILABLE", "IO_ERROR"},
}


def camel(reason: str) -> str:
    return "".join(word.capitalize() for word in reason.split("_"))


def failure_rs_reasons() -> set[str]:
    text = FAILURE_RS.read_text()
    return set(re.findall(r'"([A-Z][A-Z_]{3,})"', text))


def readme_reasons() -> set[str]:
    text = README.read_text()
    section = text.split("## The contract", 1)[1].split("\n## ", 1)[0]
    # The paragraph that lists the reasons: from the ErrorInfo sentence to its blank line.
    paragraph = section[section.index("google.rpc.ErrorInfo") :].split("\n\n", 1)[0]
    return set(re.findall(r"`([A-Z][A-Z_]{3,})`", paragraph))


def class_for(reason: str) -> type | None:
    if reason == "TRANSPORT":
        return sandboxd.TransportError
    return getattr(sandboxd, camel(reason), None)


def test_the_sources_are_found() -> None:
    assert FAILURE_RS.is_file(), f"{FAILURE_RS} not found (the repo root should be three levels up)"
    assert len(failure_rs_reasons()) > 50
    assert len(readme_reasons()) > 50


@pytest.mark.parametrize("source", ["src/session/failure.rs", "README.md"])
def test_every_reason_has_its_class(source: str) -> None:
    reasons = failure_rs_reasons() if source.endswith(".rs") else readme_reasons()
    missing = sorted(r for r in reasons if r not in BY_REASON or class_for(r) is not BY_REASON[r])
    assert not missing, (
        f"reasons in {source} without an exception class in sandboxd/errors.py: {', '.join(missing)} "
        f"(add e.g. `class {camel(missing[0])}(<Family>, reason=\"{missing[0]}\")` and export it)"
    )


def test_classes_stand_for_their_reason() -> None:
    for reason, cls in BY_REASON.items():
        assert cls.REASON == reason
        assert issubclass(cls, sandboxd.SandboxdError)
        assert cls.__bases__[0] is not sandboxd.SandboxdError or reason == "TRANSPORT", (
            f"{cls.__name__} has no family"
        )
        e = cls("msg")
        assert e.reason == reason and e.message == "msg"
    for family, reasons in FAMILIES.items():
        for reason in reasons:
            assert issubclass(BY_REASON[reason], family), (reason, family)


def test_unknown_reason_raises_its_family_or_the_base() -> None:
    assert error_class("SOMETHING_NEW", grpc.StatusCode.INVALID_ARGUMENT) is sandboxd.InvalidRequest
    assert error_class("SOMETHING_NEW", grpc.StatusCode.RESOURCE_EXHAUSTED) is sandboxd.LimitRefused
    assert error_class("SOMETHING_NEW", grpc.StatusCode.NOT_FOUND) is sandboxd.SandboxdError
    assert error_class(None, grpc.StatusCode.UNAVAILABLE) is sandboxd.Unavailable
    assert error_class(None, grpc.StatusCode.DEADLINE_EXCEEDED) is sandboxd.DeadlineExceeded
    assert error_class(None, grpc.StatusCode.UNAUTHENTICATED) is sandboxd.Unauthenticated
    assert error_class(None, grpc.StatusCode.INTERNAL) is sandboxd.TransportError
    assert error_class("TRANSPORT", grpc.StatusCode.CANCELLED) is sandboxd.Cancelled


def _field(number: int, payload: bytes) -> bytes:
    def varint(n: int) -> bytes:
        out = b""
        while True:
            b, n = n & 0x7F, n >> 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_status_details_decode() -> None:
    entry = _field(1, b"path") + _field(2, "calc\u00e9.py".encode())
    info = _field(1, b"OLD_STRING_NOT_FOUND") + _field(2, b"sandboxd") + _field(3, entry)
    any_ = _field(1, b"type.googleapis.com/google.rpc.ErrorInfo") + _field(2, info)
    blob = b"\x08\x09" + _field(2, "not found \u2026".encode()) + _field(3, any_)
    status = decode_status(blob)
    assert status is not None and status.code == 9
    assert status.message == "not found \u2026"
    assert status.error_info is not None
    assert status.error_info.reason == "OLD_STRING_NOT_FOUND"
    assert status.error_info.domain == "sandboxd"
    assert status.error_info.metadata == {"path": "calc\u00e9.py"}
    assert decode_status(b"\xff") is None


def test_errors_pickle() -> None:
    e = sandboxd.OldStringNotFound("m", code=grpc.StatusCode.FAILED_PRECONDITION, metadata={"path": "a"})
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is sandboxd.OldStringNotFound
    assert (back.reason, back.message, back.code, back.metadata) == (e.reason, e.message, e.code, e.metadata)
    assert str(back) == "[OLD_STRING_NOT_FOUND] m"
