"""Joining a Ray cluster as a driver: a clear line for a bad address, no cluster there or a Ray
version that differs from the cluster's, and nothing started here that listens (no dashboard)."""

from __future__ import annotations

import re
import socket
from typing import Any

from engine.errors import UserError

NAMESPACE = "gumbel-shogi"


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install -e '.[cluster]'") from None
    return ray


def _reachable(address: str) -> None:
    """A HOST:PORT the user named must answer before Ray is asked (Ray retries for a long time)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--ray {address}: expected auto or HOST:PORT (the head's GCS, port 6379)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UserError(f"--ray {address}: no Ray head answers there ({e.strerror or e})") from None


def connect(address: str) -> Any:
    """Join the cluster at `address` (auto: $RAY_ADDRESS or the one started on this host) as a driver
    that starts nothing of its own: no dashboard, no listening port. Returns the ray module."""
    ray = import_ray()
    if address not in ("auto", "") and not address.startswith("ray://"):
        _reachable(address)
    try:
        ray.init(address=address or "auto", log_to_driver=False, logging_level="ERROR", namespace=NAMESPACE)
    except ConnectionError as e:
        first = (str(e).strip().splitlines() or ["no cluster"])[0]
        raise UserError(f"--ray {address}: no Ray cluster to join ({first})") from None
    except RuntimeError as e:
        mismatch = version_mismatch(address, str(e))
        if mismatch is None:
            raise
        raise mismatch from None
    return ray


def version_mismatch(address: str, message: str) -> UserError | None:
    """The one line for Ray's refusal to join a cluster of another Ray or Python version (its message
    names the cluster's versions, then this process's), or None for another error."""
    if "version mismatch" not in message.lower():
        return None
    rays = re.findall(r"Ray: (\S+)", message)
    pythons = re.findall(r"Python: (\S+)", message)
    if len(rays) < 2 or len(pythons) < 2:
        first = " ".join(message.split())[:240]
        return UserError(f"--ray {address}: Ray version mismatch with the cluster: {first}")
    return UserError(
        f"--ray {address}: the cluster runs Ray {rays[0]} on Python {pythons[0]}, this host Ray {rays[1]} "
        f"on Python {pythons[1]}: install the same Ray and Python on every host"
    )
