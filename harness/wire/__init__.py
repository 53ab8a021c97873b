"""The wire to a kernel: how bytes reach it (unix, TCP, WebSocket; a
sandbox's connector), how frames are cut and classified (protocol adapters,
`--protocol module:Class`), one connection's turns (``KernelClient``), and an
agent served over HTTP (AG-UI, OpenAI-compatible, A2A: ``HttpAgentClient`` and
its protocol drivers).
Uses only ``harness.errors`` and ``harness.aio``."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "agents": ("AGENT_PROTOCOLS", "PROTOCOLS", "HttpAgentClient", "agent_driver", "check_agent_url", "is_agent_protocol"),
    "client": ("ConnError", "KernelClient", "Turn", "failed_turn", "new_nonce", "tag_nonces"),
    "protocol": ("FrameKind", "Protocol", "ProtocolError", "load_protocol"),
    "transport": ("Address", "Dialer", "parse_address"),
})
