"""--fleet ADDRESS: what it may say, checked before anything starts."""

from __future__ import annotations

import importlib.util
import ipaddress
import re
from dataclasses import dataclass

from ..errors import UsageError

FLEET_EXTRA = "pip install 'kstress[fleet]'"
MAX_LOCAL = 64  # workers of one local fleet: each is a process of ~100 MB
FLEET_HELP = ("Drive the load from a fleet of worker processes on Ray: local:N (N workers on this machine, "
              "in a private Ray instance), ray://HOST:PORT or auto (a running Ray cluster). Needs " + FLEET_EXTRA + ".")


@dataclass(frozen=True)
class FleetSpec:
    kind: str  # local | cluster
    workers: int | None  # local: N; cluster: None = one per alive node
    address: str | None = None  # cluster: ray://HOST:PORT, auto
    allow_remote: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return f"local:{self.workers}" if self.kind == "local" else str(self.address)

    def to_json(self) -> dict[str, object]:
        return {"address": self.text, "kind": self.kind, "workers": self.workers}


def parse_fleet(text: str, workers: int | None = None, allow_remote: tuple[str, ...] | None = ()) -> FleetSpec:
    """``local:N``, ``ray://HOST:PORT`` or ``auto``; a usage error naming the
    forms otherwise, and one naming the extra when Ray is not installed.
    ``allow_remote`` None: the form only, the host is checked later."""
    text = text.strip()
    forms = "local:N (N workers here), ray://HOST:PORT or auto (a running Ray cluster)"
    m = re.fullmatch(r"local:(\d+)", text)
    if m:
        n = int(m.group(1))
        if not 1 <= n <= MAX_LOCAL:
            raise UsageError(f"--fleet {text}: N is the number of workers, 1 to {MAX_LOCAL}; e.g. --fleet local:2")
        if workers is not None and workers != n:
            raise UsageError(f"--fleet {text} with --fleet-workers {workers}: local:N already says how many; drop --fleet-workers")
        spec = FleetSpec("local", n)
    elif text == "auto" or text.startswith("ray://"):
        if text != "auto":
            m = re.fullmatch(r"ray://(\[[^\]]+\]|[^:/\[\]]+):(\d+)", text)
            if not m:
                raise UsageError(f"--fleet {text}: a cluster is named ray://HOST:PORT (its Ray client server, port 10001 by default); or use {forms}")
            host = m.group(1).strip("[]")
            if allow_remote is not None and not _is_loopback(host) and host not in allow_remote:
                raise UsageError(f"--fleet {text}: {host} is not a loopback address; kstress keeps its traffic on loopback unless a host "
                                 f"is named: add --allow-remote {host} to drive from a cluster there")
        if workers is not None and not 1 <= workers <= 4096:
            raise UsageError(f"--fleet-workers {workers}: use 1 to 4096 (default: one per alive node)")
        spec = FleetSpec("cluster", workers, text)
    else:
        raise UsageError(f"--fleet {text!r}: use {forms}")
    require_ray()
    return spec


def require_ray() -> None:
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ValueError, AttributeError):  # sys.modules["ray"] = None: blocked, as good as absent
        found = False
    if not found:
        raise UsageError(f"--fleet needs Ray, which is not installed: {FLEET_EXTRA} (Ray is an optional extra of kstress)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
