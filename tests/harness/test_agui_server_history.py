"""An AG-UI server that keeps each thread's history itself and merges the
client's messages into it by id, as ag-ui-langgraph does with its
checkpointer (issue 23 item 4: such a server must still pass `sessions`).
The AG-UI driver sends the server's last MESSAGES_SNAPSHOT back, under the
server's own ids, so nothing reaches the model twice; a server that sends no
snapshot still gets the history rebuilt under kstress's ids."""

from __future__ import annotations

import contextlib
import itertools

from aiohttp import web

from harness.wire.agents import HttpAgentClient, agent_driver


def sse(obj: dict) -> bytes:
    import json

    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@contextlib.asynccontextmanager
async def merging_server(snapshot: bool):
    """A stateful server: the model sees the thread's kept messages plus every
    message of the request whose id it does not hold yet
    (langgraph_default_merge_state's rule)."""
    threads: dict[str, list[dict]] = {}
    seen: list[list[dict]] = []  # what the model was given, per run
    sent: list[list[dict]] = []  # what the client sent, per run
    ids = itertools.count()

    async def run(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        sent.append(body["messages"])
        kept = threads.setdefault(body["threadId"], [])
        held = {m["id"] for m in kept}
        kept += [m for m in body["messages"] if m["id"] not in held]
        seen.append([dict(m) for m in kept])
        answer = {"id": f"srv-{next(ids)}", "role": "assistant", "content": f"answer {len(seen)}"}
        kept.append(answer)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse({"type": "TEXT_MESSAGE_START", "messageId": answer["id"], "role": "assistant"}))
        await resp.write(sse({"type": "TEXT_MESSAGE_CONTENT", "messageId": answer["id"], "delta": answer["content"]}))
        await resp.write(sse({"type": "TEXT_MESSAGE_END", "messageId": answer["id"]}))
        if snapshot:
            await resp.write(sse({"type": "MESSAGES_SNAPSHOT", "messages": kept}))
        await resp.write(sse({"type": "RUN_FINISHED", "threadId": body["threadId"], "runId": body["runId"]}))
        return resp

    app = web.Application()
    app.router.add_post("/agui", run)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/agui", seen, sent
    finally:
        await runner.cleanup()


async def test_a_server_that_keeps_the_thread_gets_its_snapshot_back_and_sees_each_turn_once():
    async with merging_server(snapshot=True) as (url, seen, sent):
        histories: dict = {}
        driver = agent_driver("agui", url)
        async with HttpAgentClient(driver, histories=histories) as c:
            t1 = await c.turn("one", 10, session="s1")
            t2 = await c.turn("two", 10, session="s1")
        # another connection, the same session: the driver's snapshot is the target's
        async with HttpAgentClient(driver, histories=histories) as c2:
            t3 = await c2.turn("three", 10, session="s1")
    assert (t1.reply, t2.reply, t3.reply) == ("answer 1", "answer 2", "answer 3")
    # rebuilt under kstress's ids the model would have seen [one, answer 1, one, answer 1, two]
    assert [m["content"] for m in seen[1]] == [t1.text, "answer 1", t2.text]
    assert [m["content"] for m in seen[2]] == [t1.text, "answer 1", t2.text, "answer 2", t3.text]
    # sent under the server's ids (its answers' srv-N), the user's as first sent
    assert [m["id"] for m in sent[2]] == [f"u-{t1.nonce}", "srv-0", f"u-{t2.nonce}", "srv-1", f"u-{t3.nonce}"]


async def test_without_a_snapshot_the_history_is_rebuilt_and_a_merging_server_sees_it_twice():
    """The limit, named: with no MESSAGES_SNAPSHOT the client cannot know the
    server's ids, so a merging server appends the rebuilt turns again (the
    mock's `history extra:t1`), as any AG-UI client's would."""
    async with merging_server(snapshot=False) as (url, seen, sent):
        async with HttpAgentClient(agent_driver("agui", url), histories={}) as c:
            t1 = await c.turn("one", 10, session="s1")
            t2 = await c.turn("two", 10, session="s1")
    assert [m["content"] for m in seen[1]] == [t1.text, "answer 1", t1.text, "answer 1", t2.text]


async def test_a_snapshot_stands_for_the_history_only_while_it_holds_the_same_turns():
    async with merging_server(snapshot=True) as (url, seen, sent):
        histories: dict = {}
        driver = agent_driver("agui", url)
        async with HttpAgentClient(driver, histories=histories) as c:
            t1 = await c.turn("one", 10, session="s1")
            # a turn the client's histories do not hold (as after a failed turn):
            # the kept snapshot covers 1 turn, the history 0 -> rebuilt
            histories["s1"].clear()
            t2 = await c.turn("two", 10, session="s1")
    assert t1.reply == "answer 1" and [m["content"] for m in sent[1]] == [t2.text]
