"""The job's secret, and the challenge–response that proves a connection holds it.

Owns: where the secret comes from (``ACCORD_SECRET``, or ``ACCORD_SECRET_FILE`` naming a file
that only its owner can read), fresh nonces, the proofs both ends of a connection compute and
check (HMAC-SHA256 from the stdlib; the secret never crosses the wire), and the one warning a
process gets when it listens beyond loopback without a secret. Must not know sockets or wire
formats: the store (``store/tcp_auth``) and the transport (``transport/bootstrap``) wrap these
in their own handshakes.

A handshake: each side sends a fresh nonce; each proves the secret with
``proof(secret, label, direction, their_nonce, my_nonce, *context)``. The label names the
protocol (a store proof is no link proof), the direction names who proves (a proof cannot be
reflected back to its sender), and the other side's fresh nonce makes every proof good for one
connection only (a recorded handshake cannot be replayed).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import stat
import threading
import warnings

from .config import MASTER_ADDR, SETTINGS, SOCKET_IFNAME, Setting
from .errors import AuthenticationError

SECRET = Setting(
    "ACCORD_SECRET",
    None,
    "The job's shared secret: every store and rank-to-rank connection must prove it holds it "
    "(HMAC challenge-response; it never crosses the wire). Unset: anyone who can reach the "
    "ports may join, as with torch. accordrun on one node makes a fresh one per job.",
    secret=True,
)
SECRET_FILE = Setting(
    "ACCORD_SECRET_FILE",
    None,
    "A file holding the job's secret (its whole content, a final newline dropped), readable "
    "by its owner only (chmod 600); used when ACCORD_SECRET is unset.",
)
for _setting in (SECRET, SECRET_FILE):
    SETTINGS[_setting.name] = _setting

NONCE_BYTES = 32
PROOF_BYTES = 32  # SHA-256
#: Who proves: the side that accepted the connection, or the side that opened it.
ACCEPTOR, CONNECTOR = b"acceptor", b"connector"


class InsecureListenWarning(UserWarning):
    """accord listens on an address other hosts can reach, and the job has no secret."""


def job_secret() -> bytes | None:
    """The job's secret, or None when it has none. AuthenticationError when
    ACCORD_SECRET_FILE cannot be read or others could read it."""
    value = SECRET.raw()
    if value is not None:
        return value.encode("utf-8")
    path = SECRET_FILE.raw()
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            data = f.read()
    except OSError as exc:
        raise AuthenticationError(
            f"ACCORD_SECRET_FILE={path}: cannot read it ({exc.strerror or exc})"
        ) from exc
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.getuid():
        raise AuthenticationError(
            f"ACCORD_SECRET_FILE={path}: the file must belong to this user and be readable by "
            f"its owner only (mode {stat.filemode(info.st_mode)}, owner uid {info.st_uid}); "
            f"run 'chmod 600 {path}'"
        )
    secret = data[:-1] if data.endswith(b"\n") else data
    if not secret:
        raise AuthenticationError(f"ACCORD_SECRET_FILE={path}: the file is empty")
    return secret


def new_secret() -> str:
    """A fresh secret for one job (what accordrun hands its workers)."""
    return secrets.token_hex(32)


def nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(
    secret: bytes, label: bytes, direction: bytes, their_nonce: bytes, my_nonce: bytes, *context: bytes
) -> bytes:
    """What ``direction``'s side sends to prove the secret on one connection."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (label, direction, their_nonce, my_nonce, *context):
        mac.update(len(part).to_bytes(4, "little"))
        mac.update(part)
    return mac.digest()


def check(
    secret: bytes,
    received: bytes,
    label: bytes,
    direction: bytes,
    their_nonce: bytes,
    my_nonce: bytes,
    *context: bytes,
) -> bool:
    """Is ``received`` the proof ``direction``'s side had to send? (Constant time.)"""
    expected = proof(secret, label, direction, their_nonce, my_nonce, *context)
    return hmac.compare_digest(expected, received)


_warned = threading.Event()


def is_loopback(address: str) -> bool:
    """Whether ``address`` (a host name or an IP address; "" is every interface) is loopback."""
    if address in ("localhost", ""):
        return address == "localhost"
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def warn_if_exposed(address: str, what: str, ranks_on_this_host: int | None = None) -> None:
    """Once per process: ``what`` listens on ``address`` (beyond loopback) with no secret.

    ``ranks_on_this_host``: the job's size when every rank is known to run on this host (a
    launcher such as Ray Train hands a one-host job the node's network address); the warning
    then says how to keep the job on loopback instead."""
    if _warned.is_set() or is_loopback(address):
        return
    _warned.set()
    where = address or "every interface"
    if ranks_on_this_host is None:
        text = (
            f"{what} listens on {where} and the job has no secret: any process that can reach it "
            f"can join the job, read and write its store. Set {SECRET.name} (or {SECRET_FILE.name}) "
            f"to the same value on every rank (accordrun on one node makes one per job); a job on "
            f"one host can use {MASTER_ADDR.name}=127.0.0.1 instead (nothing then listens beyond "
            f"loopback)."
        )
    else:
        ranks = f"all {ranks_on_this_host} ranks run" if ranks_on_this_host > 1 else "its one rank runs"
        text = (
            f"{what} listens on {where}, an address other hosts can reach, and the job has no "
            f"secret, yet {ranks} on this host (as under Ray Train, "
            f"which sets {MASTER_ADDR.name} to the node's address): any process that can reach it "
            f"can join the job. On every rank, either set {SOCKET_IFNAME.name}=lo (accord then "
            f'listens on 127.0.0.1 only; under Ray: ray.init(runtime_env={{"env_vars": '
            f'{{"{SOCKET_IFNAME.name}": "lo"}}}})), or set {SECRET.name} (or '
            f"{SECRET_FILE.name}) to the same value."
        )
    warnings.warn(text, InsecureListenWarning, stacklevel=3)
