"""Finding the sandboxd service on this machine, as the ``sandboxd`` CLI does.

With no address given (``addr`` or ``SANDBOXD_ADDR``), :func:`address` tries
in this order:

1. the user's own service on its private socket,
   ``$XDG_RUNTIME_DIR/sandboxd.sock``, if the socket is there, is this
   user's, and accepts a connection;
2. the system service's socket, ``/run/sandboxd.sock``, if it is there and
   this user may connect to it (a member of its ``--socket-group``);
3. the default loopback address, ``127.0.0.1:50051``.

With no token given (``token`` or ``SANDBOXD_TOKEN``), :func:`local_token`
finds the one a service on this machine made for a loopback TCP address:
in the user's own service's state directory, then in the system service's
(``/var/lib/sandboxd/<service name>``) where this user may read it. It is
returned only for the exact address that service recorded beside it
(``listen``), and only while a socket of the token file's owner listens
there.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Optional

__all__ = ["address", "local_token", "DEFAULT_ADDR", "PRIVATE_SOCKET", "SYSTEM_SOCKET"]

#: Address used when no service is found on a socket.
DEFAULT_ADDR = "127.0.0.1:50051"
#: The name of a user's private service socket in ``$XDG_RUNTIME_DIR``.
PRIVATE_SOCKET = "sandboxd.sock"
#: The system service's socket (see deploy/sandboxd.service).
SYSTEM_SOCKET = "/run/sandboxd.sock"
#: Where the system service (run by root) keeps its state directories.
SYSTEM_STATE_ROOT = "/var/lib/sandboxd"
#: The service name when ``SANDBOXD_SERVICE_NAME`` gives none.
SERVICE_NAME = "sandboxd"
#: Seconds a socket may take to accept the probing connection.
PROBE_TIMEOUT = 2.0


def address() -> str:
    """The address of the service this user reaches on this machine."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime_dir):
        own = os.path.join(runtime_dir, PRIVATE_SOCKET)
        if _socket_owner(own) == os.geteuid() and _answers(own):
            return f"unix:{own}"
    if _socket_owner(SYSTEM_SOCKET) is not None and _answers(SYSTEM_SOCKET):
        return f"unix:{SYSTEM_SOCKET}"
    return DEFAULT_ADDR


def _socket_owner(path: str) -> Optional[int]:
    """The owner of the socket at ``path`` (itself a socket, not a link to one)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_uid if stat.S_ISSOCK(st.st_mode) else None


def _answers(path: str) -> bool:
    """Whether a connection to the socket at ``path`` is accepted in time."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(PROBE_TIMEOUT)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def _state_root() -> Path:
    """The state root of a service run by this user (as the service computes it)."""
    if os.geteuid() == 0:
        return Path(SYSTEM_STATE_ROOT)
    base = os.environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(base):
        return Path(base) / "sandboxd"
    home = os.environ.get("HOME")
    if home:
        return Path(home) / ".local/state/sandboxd"
    return Path("/var/lib/sandboxd")


def local_token(addr: str) -> Optional[str]:
    """The token a local service made for exactly ``addr`` (see the module's doc)."""
    service = os.environ.get("SANDBOXD_SERVICE_NAME") or SERVICE_NAME
    own = _state_root() / service
    system = Path(SYSTEM_STATE_ROOT) / service
    for state in (own,) if own == system else (own, system):
        token = _token_in(state, addr)
        if token:
            return token
    return None


def _loopback(addr: str) -> Optional[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(ip, port) of a loopback TCP address (``host:port`` or ``http://host:port``)."""
    if addr.startswith("http://"):
        addr = addr[len("http://") :].rstrip("/")
    elif "://" in addr or addr.startswith("unix:"):
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if not ip.is_loopback or int(port) > 65535:
        return None
    return ip, int(port)


def _token_in(state: Path, addr: str) -> Optional[str]:
    """The token in the state directory ``state`` if it was made for ``addr``."""
    target = _loopback(addr)
    if target is None:
        return None
    try:
        recorded = _loopback((state / "listen").read_text().strip())
        token_file = state / "token"
        owner = token_file.stat().st_uid
        if recorded != target or _listener_owner(*target) != owner:
            return None
        token = token_file.read_text().strip()
    except OSError:
        return None
    return token or None


def _listener_owner(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> Optional[int]:
    """The uid owning the TCP socket listening on ``ip:port``, from the kernel's tables."""
    # /proc/net/tcp* name an address as the hex of its bytes in memory (each
    # 32-bit word in host order) and the port in big-endian hex.
    packed = ip.packed
    words = "".join("%08X" % struct.unpack("=I", packed[i : i + 4])[0] for i in range(0, len(packed), 4))
    want = f"{words}:{port:04X}"
    table = "/proc/net/tcp" if ip.version == 4 else "/proc/net/tcp6"
    listen = "0A"
    try:
        with open(table) as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == want and fields[3] == listen:
            try:
                return int(fields[7])
            except ValueError:
                return None
    return None
