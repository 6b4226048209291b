"""The WebSocket gateway, and a Python client talking to it.

The gateway serves agent classes at ``/agents/<class-in-kebab-case>/<name>`` and speaks the Cloudflare ``agents``
chat protocol: a client sends a ``cf_agent_use_chat_request`` frame holding the new messages, and every socket of
that agent gets the reply's chunks as ``cf_agent_use_chat_response`` frames (each ``body`` one UI message chunk
as JSON), then the stored transcript (``cf_agent_chat_messages``), then a ``done`` frame. Front ends written for
``agents`` (``useAgentChat``) work unchanged; here the client is ``aiohttp``.

``think-actors serve --app mymodule`` runs the same gateway from the command line (agents on Ray; ``--local`` in
process). This example starts it inside its own process, on a free port, with the agents in process too.

Run it:  python examples/08_gateway_client.py
"""

import asyncio
import json

import aiohttp
from aiohttp import web

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, text


class Helper(ta.Think):
    instructions = "You help."
    model = ScriptedModel([text("Hello from the gateway!", chunk_size=6)])


def chat_request(request_id: str, message: str) -> str:
    """A chat request frame: the body is what the AI SDK's ``useChat`` POSTs, as a string."""
    body = {
        "messages": [{"id": f"user-{request_id}", "role": "user", "parts": [{"type": "text", "text": message}]}],
        "trigger": "submit-message",
    }
    frame = {
        "type": "cf_agent_use_chat_request",
        "id": request_id,
        "init": {"method": "POST", "body": json.dumps(body)},
    }
    return json.dumps(frame)


async def client(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/agents/helper/demo") as ws:
        await ws.send_str(chat_request("req-1", "Say hello."))
        async for received in ws:
            frame = json.loads(received.data)
            if frame["type"] == "cf_agent_chat_messages":  # the transcript: on connect, and after the reply
                print(f"[transcript] {len(frame['messages'])} messages")
            elif frame["type"] == "cf_agent_use_chat_response" and frame["id"] == "req-1":
                if frame["done"]:
                    print(f"[done] {frame['outcome']}")
                    break
                chunk = json.loads(frame["body"])
                if chunk["type"] == "text-delta":
                    print(chunk["delta"], end="", flush=True)
                elif chunk["type"] == "finish":
                    print()


async def main() -> None:
    gateway = Gateway(LocalDirectory([Helper], store=ta.MemoryStore()))  # no token: loopback clients only
    runner = web.AppRunner(gateway.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()  # port 0: any free port
    host, port = runner.addresses[0][:2]
    print(f"gateway at http://{host}:{port}/")
    try:
        await client(f"http://{host}:{port}")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
