"""The wire to a kernel: how bytes reach it (unix, TCP, WebSocket; a
sandbox's connector), how frames are cut and classified (protocol adapters,
`--protocol module:Class`), and one connection's turns (``KernelClient``).
Uses only ``harness.errors`` and ``harness.aio``."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "client": ("ConnError", "KernelClient", "Turn", "failed_turn", "new_nonce"),
    "protocol": ("FrameKind", "Protocol", "ProtocolError", "load_protocol"),
    "transport": ("Address", "Dialer", "parse_address"),
})
