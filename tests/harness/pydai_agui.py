#!/usr/bin/env python3
"""A pydantic-ai agent served over AG-UI by pydantic-ai's own AGUIAdapter
(pydantic-ai-slim 2.68.0, ag-ui-protocol 1.0.0), on uvicorn: a real
framework's AG-UI server with no kstress code in it (issue 23). Its model is
the kstress mock (``--llm-url``); its tools carry the mock catalog's default
names (lookup, cmd_run, knowledge_create).

    python pydai_agui.py --llm-url http://127.0.0.1:P/v1 --port 0

prints ``agent listening on http://127.0.0.1:PORT/agui``.
"""

import argparse
import asyncio
import socket

import uvicorn
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def make_agent(llm_url: str) -> Agent:
    # retries 0: a retried 5xx would hide a fault (and triple the mock's requests)
    client = AsyncOpenAI(base_url=llm_url, api_key="kstress", max_retries=0, timeout=60)
    agent = Agent(OpenAIChatModel("kstress-mock", provider=OpenAIProvider(openai_client=client)),
                  system_prompt="Call the tools you are asked for, then answer with the text you are given.")

    @agent.tool_plain
    async def lookup(key: str, query: str = "") -> str:
        """Look a key up."""
        return f"lookup {key}: entry (query {query!r})"

    @agent.tool_plain
    async def cmd_run(command: str) -> str:
        """Run a shell command."""
        proc = await asyncio.create_subprocess_exec("/bin/sh", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return out.decode(errors="replace") or "(no output)"

    @agent.tool_plain
    async def knowledge_create(title: str, content: str) -> str:
        """Create a note."""
        return f"created note {title}"

    return agent


def make_app(llm_url: str) -> Starlette:
    agent = make_agent(llm_url)

    async def run(request: Request) -> Response:
        return await AGUIAdapter.dispatch_request(request, agent=agent)

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm-url", required=True)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    print(f"agent listening on http://127.0.0.1:{sock.getsockname()[1]}/agui", flush=True)
    config = uvicorn.Config(make_app(a.llm_url), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
