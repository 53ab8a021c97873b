"""The hot path: replies templated per *shape*.

Every first streamed request carries its own nonce, but the replies to
requests with the same marker and the same nonce length on one dialect differ
only in the nonce's characters (and the per-response id, time and model). A
Shape keeps that reply as a template (wire.StreamTemplate) with the nonce left
as holes, built once per (dialect, marker, nonce length) and cached in
MockState.shapes; ``shape_reply`` fills it in. aiohttp's handler
(mock/server.py) and the fast path (mock/fastpath.py) both answer from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import wire
from .dialects import Dialect, Reply, Turn, text_reply
from .errors import MarkerError
from .exchange import Exchange, MockState
from .markers import TAG_BYTES, Plan, build_plan, find_nonce, parse_markers, parse_session_nonce, text_verdict, verdict_tag

if TYPE_CHECKING:
    from .server import MockSettings

SHAPE_KINDS = frozenset({"text", "batch", "mixed", "slowbatch", "serialbatch", "img", "ocr", "resident", "notify"})
SHAPE_CAPACITY = 1024
_MISSING = object()


@dataclass(frozen=True)
class Shape:
    """Everything a first (non-follow-up) streamed reply to one marker needs,
    for every nonce of one length on one dialect: the plan's kind, the stream
    template, and what the dialect said of the shape (numbers that do not
    depend on the nonce's characters)."""

    kind: str
    marker: str | None
    template: wire.StreamTemplate
    has_tools: bool
    info: dict[str, Any]
    # a text reply's verdict line is tagged under this key: the tag is a hole
    # of its own, after the nonce's (the template is built for nonce + tag)
    key: bytes | None = None


def shape_reply(dialect: Dialect, turn: Turn, found: tuple["Shape", str], model: str, state: MockState, ex: Exchange) -> list[bytes]:
    """A first streamed reply from its cached shape: the exchange's record, the
    store entry and the events (aiohttp's handler and the fast path alike)."""
    shape, nonce = found
    fill = nonce if shape.key is None else nonce + verdict_tag(text_verdict(nonce), shape.key)
    rec = ex.rec
    rec["stream"] = turn.stream
    rec["n_messages"] = turn.n_messages
    rec["followup"] = turn.followup
    rec["plan"] = shape.kind
    rec["nonce"] = nonce
    rec["marker"] = shape.marker
    state.plans[shape.kind] += 1
    entry = ex.attach(state.store.entry(nonce), turn, dialect.name)
    entry.plan, entry.marker = shape.kind, shape.marker
    if shape.has_tools:
        ex.tool_stream = True
    else:
        entry.text_verdict = True
        rec["text_verdict"] = text_verdict(nonce)
    return dialect.template_fill(shape.template, fill, shape.info, turn, model)


def shape_for(dialect: Dialect, user_text: str, settings: MockSettings, state: MockState) -> tuple[Shape, str] | None:
    """The cached shape of this message's reply and its nonce, or None when the
    reply must be built the general way (no explicit nonce, a bad marker, a
    fault/hang/quirk marker, a nonce longer than 64)."""
    nonce = find_nonce(user_text)
    if nonce is None or ("_t" in nonce and parse_session_nonce(nonce) is not None):
        return None  # a session turn's replies carry its history token
    try:
        marker, fault = parse_markers(user_text)
    except MarkerError:
        return None  # the general path answers 400
    if fault is not None:
        return None  # a fault schedule: each attempt is decided apart
    token = marker.token if marker is not None else None
    key = (dialect.name, token, len(nonce))
    shape = state.shapes.get(key, _MISSING)
    if shape is _MISSING:
        shape = _build_shape(dialect, token, len(nonce), settings)
        if len(state.shapes) < SHAPE_CAPACITY:
            state.shapes[key] = shape
    return None if shape is None else (shape, nonce)  # type: ignore[return-value]


def _build_shape(dialect: Dialect, token: str | None, length: int, settings: MockSettings) -> Shape | None:
    # build_plan depends on the message only through its marker and its nonce,
    # so "TOKEN #nonce" stands for every message with that marker
    def plan_for(nonce: str) -> Plan:
        return build_plan(f"{token or ''} #{nonce}", settings.catalog, settings.tool_ms, settings.mixed_ms)

    key = settings.verdict_key

    def reply_for(plan: Plan, tag: str | None = None) -> Reply:
        if plan.calls:
            return Reply(calls=plan.calls, finish="tool_calls", nonce=plan.nonce)
        return Reply(text=text_reply(plan.nonce, key=key, tag=tag), pieces=settings.text_chunks, nonce=plan.nonce)

    def render(nonce: str) -> list[str]:
        plan = plan_for(nonce)
        return dialect.template_render(plan, reply_for(plan))

    def render_tagged(probe: str) -> list[str]:
        # the tag depends on the nonce by a hash, not by copying its characters:
        # the template takes it as more characters of the fill (nonce + tag)
        plan = plan_for(probe[:length])
        return dialect.template_render(plan, reply_for(plan, tag=probe[length:]))

    try:
        plan = plan_for(wire.NONCE_ALPHABET[:length])
    except MarkerError:
        return None
    if plan.kind not in SHAPE_KINDS or plan.quirk is not None:
        return None
    tagged = key is not None and not plan.calls
    if tagged:
        template = wire.StreamTemplate.build(render_tagged, length + 2 * TAG_BYTES)
    else:
        template = wire.StreamTemplate.build(render, length)
    if template is None:
        return None
    return Shape(
        kind=plan.kind,
        marker=plan.marker,
        template=template,
        has_tools=bool(plan.calls),
        info=dialect.template_info(plan, reply_for(plan)),
        key=key if tagged else None,
    )
