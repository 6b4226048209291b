"""An OpenAI-compatible chat-completions server that streams at a real provider's pace, for the benchmarks.

Every streaming request gets an answer (no script to queue): the first token after ``--first-token-s``, then one
token per SSE event every ``1 / --tokens-per-s`` seconds, ``--tokens`` tokens in all, then the finish chunk, the
usage chunk when asked for and ``[DONE]``. A token is a short word and a space (``"w17 "``), so an answer's text
is known in advance: ``answer(tokens)``.

A tool turn: when the last message is the user's, its text starts with ``TOOL_PREFIX`` and the request offers
tools, the answer is one call of the first tool offered, with ``{"query": <the rest of the text>}`` as arguments
(streamed at the same pace, one event for the call, one for its arguments), finish reason ``tool_calls``; the
request that follows (whose last message is the tool's result) is answered with text as usual.

Run it as a process of its own (a provider is another machine, not a share of the benchmark's event loop)::

    python scripts/paced_provider.py --port 0 --first-token-s 0.3 --tokens-per-s 50 --tokens 60

It prints ``listening on http://127.0.0.1:PORT/v1`` once it accepts connections. ``GET /stats`` answers the
streams served, open, the tokens sent (``written``: as they go) and how late the provider itself wrote them
(``late_ms_max``, and ``late_tokens``: tokens written more than ``LATE_MS`` after their time, so a benchmark can
tell a busy provider from a slow system). ``POST /pace`` with ``{"tokens_per_s": 150}`` changes the pace of the
streams that start after it (a benchmark varies the pace without restarting the systems behind it); ``POST
/stats/reset`` zeroes the counters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import web

TOOL_PREFIX = "tool:"
LATE_MS = 5.0  # a token written later than this after its time counts in ``late_tokens``


def token(index: int) -> str:
    """The ``index``-th token of every answer."""
    return f"w{index} "


def answer(tokens: int) -> str:
    """The whole text of an answer of ``tokens`` tokens."""
    return "".join(token(i) for i in range(tokens))


class PacedProvider:
    """The server's state: its pace and what it served."""

    def __init__(self, *, first_token_s: float, tokens_per_s: float, tokens: int, model: str = "paced") -> None:
        self.first_token_s = first_token_s
        self.interval_s = 1.0 / tokens_per_s
        self.tokens = tokens
        self.model = model
        self.served = 0
        self.open = 0
        self.sent_tokens = 0
        self.late_s_max = 0.0
        self.late_tokens = 0
        self.written = 0  # text tokens written, counted as they go (``tokens`` counts finished streams)
        self._ids = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/stats/reset", self.reset)
        app.router.add_post("/pace", self.pace)
        return app

    async def stats(self, request: web.Request) -> web.Response:
        stats = {"served": self.served, "open": self.open, "tokens": self.sent_tokens}
        stats |= {"late_ms_max": self.late_s_max * 1e3, "late_tokens": self.late_tokens, "written": self.written}
        return web.json_response({**stats, "tokens_per_s": 1.0 / self.interval_s})

    async def reset(self, request: web.Request) -> web.Response:
        self.served = self.sent_tokens = self.late_tokens = self.written = 0
        self.late_s_max = 0.0
        return await self.stats(request)

    async def pace(self, request: web.Request) -> web.Response:
        self.interval_s = 1.0 / float((await request.json())["tokens_per_s"])
        return await self.stats(request)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response(
                {"error": {"message": "this server only streams", "type": "invalid_request"}}, status=400
            )
        self._ids += 1
        base = {"id": f"chatcmpl-paced-{self._ids}", "object": "chat.completion.chunk", "created": int(time.time())}
        base["model"] = self.model

        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        text = last.get("content") if isinstance(last.get("content"), str) else ""
        call_tool = last.get("role") == "user" and text.startswith(TOOL_PREFIX) and bool(body.get("tools"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        self.open += 1
        loop = asyncio.get_running_loop()
        interval_s = self.interval_s  # a change of pace applies to the streams that start after it
        try:
            start = loop.time()
            await asyncio.sleep(self.first_token_s)
            await response.write(event({"role": "assistant", "content": ""}))
            if call_tool:
                name = body["tools"][0]["function"]["name"]
                call = {"index": 0, "id": f"call_{self._ids}", "type": "function"}
                await response.write(event({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]}))
                await asyncio.sleep(interval_s)
                arguments = json.dumps({"query": text[len(TOOL_PREFIX) :].strip()})
                await response.write(event({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}))
                finish = "tool_calls"
                count = 2
            else:
                for i in range(self.tokens):
                    # Paced against the stream's start, not the last write: a busy loop does not slow the provider.
                    due = start + self.first_token_s + i * interval_s
                    delay = due - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    late = loop.time() - due
                    if late > self.late_s_max:
                        self.late_s_max = late
                    if late > LATE_MS / 1e3:
                        self.late_tokens += 1
                    self.written += 1
                    await response.write(event({"content": token(i)}))
                finish = "stop"
                count = self.tokens
            self.sent_tokens += count
            await response.write(event({}, finish))
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": count}
                usage["total_tokens"] = usage["prompt_tokens"] + count
                payload = {**base, "choices": [], "usage": usage}
                await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            self.served += 1
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the client went away
        finally:
            self.open -= 1
        return response


async def serve(host: str, port: int, provider: PacedProvider) -> None:
    runner = web.AppRunner(provider.app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = runner.addresses[0]
    print(f"listening on http://{bound[0]}:{bound[1]}/v1", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--first-token-s", type=float, default=0.3)
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=60)
    args = parser.parse_args()
    provider = PacedProvider(first_token_s=args.first_token_s, tokens_per_s=args.tokens_per_s, tokens=args.tokens)
    asyncio.run(serve(args.host, args.port, provider))


if __name__ == "__main__":
    main()
