"""refkernel: the reference agent kernel, kstress's default system under test.

It talks to the others only over the wire (imports neither ``harness`` nor
``mock``). Public surface::

    KernelSettings, FAULTS          -- what to run, which known bugs to switch on
    Kernel                          -- the kernel as an async context manager
    RefkernelError, ConfigError, SocketInUse

docs/refkernel.md describes running it; docs/protocol.md its socket protocol.
"""

__version__ = "0.1.0"

from .errors import ConfigError, RefkernelError, SocketInUse  # noqa: E402
from .kernel import Kernel  # noqa: E402
from .settings import FAULTS, KernelSettings  # noqa: E402


__all__ = ["ConfigError", "FAULTS", "Kernel", "KernelSettings", "RefkernelError", "SocketInUse"]
