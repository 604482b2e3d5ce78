"""Decoding of `grpc-status-details-bin`: a google.rpc.Status whose details
hold a google.rpc.ErrorInfo.

The three messages are tiny and stable, so they are read straight off the
protobuf wire format here instead of pulling in googleapis-common-protos.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

DETAILS_KEY = "grpc-status-details-bin"
ERROR_INFO_TYPE = "google.rpc.ErrorInfo"


@dataclass(frozen=True)
class ErrorInfo:
    """google.rpc.ErrorInfo."""

    reason: str
    domain: str
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RpcStatus:
    """google.rpc.Status, with its first ErrorInfo (if any) decoded."""

    code: int
    message: str
    error_info: Optional[ErrorInfo]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Union[int, bytes]]]:
    """(field number, value) pairs: an int for varints, bytes otherwise."""
    i = 0
    n = len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: Union[int, bytes]
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            length, i = _varint(buf, i)
            value, i = buf[i : i + length], i + length
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if i > n:
            raise ValueError("truncated message")
        yield number, value


def _text(v: Union[int, bytes]) -> str:
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else ""


def _error_info(buf: bytes) -> ErrorInfo:
    reason = domain = ""
    metadata: dict[str, str] = {}
    for number, value in _fields(buf):
        if number == 1:
            reason = _text(value)
        elif number == 2:
            domain = _text(value)
        elif number == 3 and isinstance(value, bytes):
            key = val = ""
            for n, v in _fields(value):
                if n == 1:
                    key = _text(v)
                elif n == 2:
                    val = _text(v)
            metadata[key] = val
    return ErrorInfo(reason, domain, metadata)


def decode_status(blob: bytes) -> Optional[RpcStatus]:
    """Decodes a serialized google.rpc.Status; None if it does not parse."""
    try:
        code = 0
        message = ""
        info: Optional[ErrorInfo] = None
        for number, value in _fields(blob):
            if number == 1 and isinstance(value, int):
                code = value
            elif number == 2:
                message = _text(value)
            elif number == 3 and isinstance(value, bytes) and info is None:
                type_url = ""
                payload = b""
                for n, v in _fields(value):
                    if n == 1:
                        type_url = _text(v)
                    elif n == 2 and isinstance(v, bytes):
                        payload = v
                if type_url.rsplit("/", 1)[-1] == ERROR_INFO_TYPE:
                    info = _error_info(payload)
        return RpcStatus(code, message, info)
    except ValueError:
        return None
