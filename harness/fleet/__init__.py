"""A fleet of drivers on Ray (issue 25, docs/fleet.md): ``--fleet local:N``
starts N driver workers on this machine in a private Ray instance, ``--fleet
ray://HOST:PORT`` or ``auto`` joins a running Ray cluster. The head (the kstress
process) keeps the run directory; each worker drives its share of the load and
judges its own turns; the rows come back in batches.

Ray lives in a child process of the head, the *bridge* (``python -m
harness.fleet.bridge``): only the bridge and the workers import ray, so a run
without --fleet never pays for it, and a local fleet's bridge runs in its own
network and PID namespaces -- Ray's servers bind every address they find, and
there they find only ``lo``; when the bridge ends, the kernel ends every Ray
process it started. Uses nothing of the harness but the base."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "spec": ("FLEET_EXTRA", "FLEET_HELP", "FleetSpec", "parse_fleet", "require_ray"),
    "head": ("Fleet", "FleetLost", "WorkerInfo"),
})
