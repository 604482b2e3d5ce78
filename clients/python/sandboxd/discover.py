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

Whose service answers is checked on every connection, not once. Any local
user can listen on a free loopback port, and the fallback port is free
whenever the user's own service is down; a grpc channel reconnects by
itself, so a check made when the client is built would not hold for the
calls after a restart. So a client whose loopback TCP address was found
(not given), or which carries a token read from a state directory, reaches
it through a :class:`Relay`: grpc connects to a Unix socket in a private
directory of this process, and each of its connections is carried on to
the address only once the socket that accepted the relay's TCP connection
is seen in the kernel's tables to belong to a trusted user (the user or
root for a found address, the token file's owner for such a token).
Nothing is written to a connection before that. Each call is also checked
first against the listener on the port, so that a stranger's listener is
named in an :class:`UntrustedService` error at once.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import NamedTuple, Optional, Union

import grpc

from .errors import TransportError

__all__ = [
    "address",
    "local_token",
    "found_token",
    "FoundToken",
    "Relay",
    "UntrustedService",
    "DEFAULT_ADDR",
    "PRIVATE_SOCKET",
    "SYSTEM_SOCKET",
]

IP = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

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


class FoundToken(NamedTuple):
    """A token read from a service's state directory."""

    #: The token.
    token: str
    #: The uid owning the token file: the only one whose listener gets it.
    owner: int
    #: The state directory it was read from.
    state: Path


def local_token(addr: str) -> Optional[str]:
    """The token a local service made for exactly ``addr`` (see the module's doc)."""
    found = found_token(addr)
    return found.token if found else None


def found_token(addr: str) -> Optional[FoundToken]:
    """:func:`local_token` with the owner and directory it comes from."""
    service = os.environ.get("SANDBOXD_SERVICE_NAME") or SERVICE_NAME
    own = _state_root() / service
    system = Path(SYSTEM_STATE_ROOT) / service
    for state in (own,) if own == system else (own, system):
        found = _token_in(state, addr)
        if found:
            return found
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


def _token_in(state: Path, addr: str) -> Optional[FoundToken]:
    """The token in the state directory ``state`` if it was made for ``addr``."""
    target = _loopback(addr)
    if target is None:
        return None
    try:
        recorded = _loopback((state / "listen").read_text().strip())
        token_file = state / "token"
        owner = token_file.stat().st_uid
        if recorded != target or _any_listener_owner(*target) != owner:
            return None
        token = token_file.read_text().strip()
    except OSError:
        return None
    return FoundToken(token, owner, state) if token else None


def _name(ip: IP, port: int) -> str:
    """``ip:port`` as /proc/net/tcp* name it: the hex of the address's bytes in
    memory (each 32-bit word in host order) and the port in big-endian hex."""
    packed = ip.packed
    words = "".join("%08X" % struct.unpack("=I", packed[i : i + 4])[0] for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def _table(version: int) -> list[list[str]]:
    """The fields of each socket in the kernel's TCP table of IP ``version``."""
    try:
        with open("/proc/net/tcp" if version == 4 else "/proc/net/tcp6") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    return [fields for fields in (line.split() for line in lines) if len(fields) > 7]


def _uid(fields: list[str]) -> Optional[int]:
    try:
        return int(fields[7])
    except ValueError:
        return None


_LISTEN = "0A"
#: The service's end of a connection not yet closed: established, or still a
#: request socket (SYN_RECV), shown with its listener's owner.
_ACCEPTED = ("01", "03")


def _listener_owner(ip: IP, port: int) -> Optional[int]:
    """The uid owning the TCP socket listening on ``ip:port``, from the kernel's tables."""
    want = _name(ip, port)
    for fields in _table(ip.version):
        if fields[1] == want and fields[3] == _LISTEN:
            return _uid(fields)
    return None


def _any_listener_owner(ip: IP, port: int) -> Optional[int]:
    """The uid owning the socket that would accept a connection to ``ip:port``:
    one listening there, else on the wildcard address of its family, or (for
    IPv4) on the IPv6 wildcard, which takes IPv4 too."""
    candidates: list[IP] = [ip]
    if ip.version == 4:
        wildcards = ("0.0.0.0", f"::ffff:{ip}", "::")
        candidates += [ipaddress.ip_address(w) for w in wildcards]
    else:
        candidates.append(ipaddress.ip_address("::"))
    for candidate in candidates:
        owner = _listener_owner(candidate, port)
        if owner is not None:
            return owner
    return None


def _accepting_owner(local: tuple[IP, int], remote: tuple[IP, int]) -> Optional[int]:
    """The uid owning the service's end of our connection from ``local`` to
    ``remote``: the socket that accepted it, which carries its listener's owner.
    Unlike the listener seen before connecting, it is the very socket our bytes
    would reach."""
    ends = [(remote, local)]
    if remote[0].version == 4 and local[0].version == 4:
        # A dual-stack IPv6 listener shows its end in the IPv6 table, mapped.
        mapped = lambda end: (ipaddress.IPv6Address(f"::ffff:{end[0]}"), end[1])  # noqa: E731
        ends.append((mapped(remote), mapped(local)))
    for (service_ip, service_port), (our_ip, our_port) in ends:
        service_end, our_end = _name(service_ip, service_port), _name(our_ip, our_port)
        for fields in _table(service_ip.version):
            if fields[1] == service_end and fields[2] == our_end and fields[3] in _ACCEPTED:
                return _uid(fields)
    return None


class UntrustedService(TransportError):
    """The service answering at an address the client found (not one given), or
    at the address a state directory's token is for, belongs to a user it must
    not trust. Nothing was sent to it; the message names the address and the
    uid found, and how to point the client at the right service."""


def _whom(uids: list[int]) -> str:
    me = os.geteuid()
    if sorted(uids) == sorted({me, 0}):
        return "you (root)" if me == 0 else f"you (uid {me}) or root"
    return " or ".join(f"uid {u}" for u in uids) or "nobody"


class Relay:
    """Carries a grpc channel's connections to the loopback TCP address
    ``ip:port`` through a Unix socket in a private directory of this process
    (``path``; give grpc ``unix:`` + path), each one handed over only once the
    socket that accepted the relay's connection belongs to one of ``owners``
    (see the module's doc). ``why`` and ``fix`` are said in a refusal.
    :meth:`close` stops it and removes its directory."""

    def __init__(self, ip: IP, port: int, owners: list[int], why: str, fix: str) -> None:
        self.ip, self.port = ip, port
        self.owners = list(owners)
        self._why, self._fix = why, fix
        #: Why the last connection was refused, until one is accepted again.
        self.refusal: Optional[str] = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._dir = tempfile.mkdtemp(prefix="sandboxd-relay-")
        self.path = os.path.join(self._dir, "s")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._closed = False
        # A client never closed leaves no directory behind.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        threading.Thread(target=self._accept, name="sandboxd-relay", daemon=True).start()

    @property
    def addr(self) -> str:
        host = str(self.ip) if self.ip.version == 4 else f"[{self.ip}]"
        return f"{host}:{self.port}"

    def message(self, owner: Optional[int]) -> str:
        """The refusal of a service of ``owner`` (None: not seen)."""
        found = f"belongs to uid {owner}" if owner is not None else "has an owner the kernel's tables do not show"
        return (
            f"nothing was sent to {self.addr}: the service answering there {found}, and only "
            f"a service of {_whom(self.owners)} is trusted there ({self._why}); another local "
            f"user can take a port while its service is down. {self._fix}"
        )

    def check_listener(self) -> None:
        """Raises :class:`UntrustedService` if a listener of an untrusted user
        holds the port (nothing listening is left to the connection to find)."""
        owner = _any_listener_owner(self.ip, self.port)
        if owner is not None and owner not in self.owners:
            raise UntrustedService(self.message(owner), code=grpc.StatusCode.UNAVAILABLE)

    def refused(self) -> Optional[UntrustedService]:
        """The refusal of the last connection, if it was refused."""
        refusal = self.refusal
        return UntrustedService(refusal, code=grpc.StatusCode.UNAVAILABLE) if refusal else None

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._carry, args=(conn,), name="sandboxd-relay-conn", daemon=True).start()

    def _connect(self) -> socket.socket:
        """A TCP connection to the address, refused unless its service is trusted."""
        family = socket.AF_INET if self.ip.version == 4 else socket.AF_INET6
        upstream = socket.socket(family, socket.SOCK_STREAM)
        try:
            upstream.settimeout(PROBE_TIMEOUT)
            upstream.connect((str(self.ip), self.port))
            upstream.settimeout(None)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            local = upstream.getsockname()
            ends = ((ipaddress.ip_address(local[0]), local[1]), (self.ip, self.port))
            owner = None
            # The kernel lists the service's end once the handshake is done; a
            # few short retries cover a table read mid-change.
            for _ in range(5):
                owner = _accepting_owner(*ends)
                if owner is not None:
                    break
                time.sleep(0.01)
        except OSError:
            # Nobody took the port: not a stranger's refusal.
            self.refusal = None
            upstream.close()
            raise
        if owner not in self.owners:
            upstream.close()
            self.refusal = self.message(owner)
            raise PermissionError(self.refusal)
        self.refusal = None
        return upstream

    def _carry(self, conn: socket.socket) -> None:
        try:
            upstream = self._connect()
        except OSError:
            conn.close()
            return
        with self._lock:
            if self._closed:
                conn.close()
                upstream.close()
                return
            self._open.update((conn, upstream))
        back = threading.Thread(target=self._pump, args=(upstream, conn), daemon=True)
        back.start()
        self._pump(conn, upstream)
        back.join()
        with self._lock:
            self._open.difference_update((conn, upstream))
        conn.close()
        upstream.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        """Copies ``src`` to ``dst`` until ``src`` ends, then ends ``dst``'s writing."""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass

    def close(self) -> None:
        """Stops relaying, ends every relayed connection and removes the socket."""
        with self._lock:
            self._closed = True
            open_now = list(self._open)
        for sock in (self._listener, *open_now):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._listener.close()
        self._cleanup()


def relay_for(addr: str, *, found: bool, token: Optional[FoundToken]) -> Optional[Relay]:
    """The :class:`Relay` a client of ``addr`` must go through: when the address
    was found rather than given (only the user's or root's service), or the
    token comes from a state directory (only its owner's service); None when
    neither holds or the address is not loopback TCP (a found Unix socket was
    checked to be the user's own, or lies in a directory only root may change)."""
    target = _loopback(addr)
    if target is None or not (found or token):
        return None
    me = os.geteuid()
    owners = sorted({me, 0})
    why = "the address was found, not given"
    fix = (
        "Start your own service (`sandboxd serve`), or point at the right one: the addr "
        "argument or SANDBOXD_ADDR, or XDG_RUNTIME_DIR (your service's socket is "
        f"$XDG_RUNTIME_DIR/{PRIVATE_SOCKET}"
        + (", and XDG_RUNTIME_DIR is not set here)" if not os.environ.get("XDG_RUNTIME_DIR") else ")")
    )
    if token is not None:
        if not found:
            owners = [token.owner]
            why = f"the token it would carry was read from {token.state}, which uid {token.owner} owns"
            fix = (
                "Start that service again, or give a token yourself (token or SANDBOXD_TOKEN) "
                "to send one to whoever listens there"
            )
        elif token.owner in owners:
            owners = [token.owner]
            why += f", and the token it would carry was read from {token.state}, which uid {token.owner} owns"
        else:
            owners = []
            why += f", and the token it would carry (from {token.state}) is uid {token.owner}'s"
    return Relay(target[0], target[1], owners, why, fix)
