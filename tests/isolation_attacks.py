"""What the multi-tenant isolation suites share (tests/test_gateway_isolation.py, in process, and
tests/ray/test_gateway_isolation_on_ray.py): the agent classes, a model that answers by prompt, the identity
provider's tokens (good and forged), the frames an attacker sends, and the name variants that try to reach another
user's agent.

The classes live here, not in a test module, because Ray workers import them by module name (``tests`` is on
``sys.path``, which ``ta.init`` hands to the workers).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import jwt

import think_actors as ta
from think_actors.gateway import JWTAuth
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.testing import ScriptedModel, Step, text, tool_call

WAIT_S = 10.0  # upper bound on any one frame or response

SECRET = "isolation-suite-identity-provider-hmac-secret-" + "k" * 20  # the identity provider's HS256 key
OTHER_SECRET = "a-key-the-gateway-never-heard-of-" + "0123456789" * 4

ASK = {"name": "ask", "description": "Ask the user", "parameters": {"type": "object", "properties": {}}}

# What the model answers to each prompt, as ScriptedModel steps (a prompt's script plays one step per request,
# the continuation after a tool answer included). Any other prompt is echoed.
SCRIPTS: dict[str, list[Step]] = {
    "remember milk": [text("noted: milk")],
    "remember eggs": [text("noted: eggs")],
    "wipe my notes": [tool_call("wipe", {}, id="call-wipe"), text("wiped")],
    "where am I?": [tool_call("ask", {}, id="call-ask"), text("you are in Oslo")],
    # Bob's own calls under the same ids as alice's: ids are per agent, so each answer must reach its own.
    "bob wipes": [tool_call("wipe", {}, id="call-wipe"), text("bob's notes wiped")],
    "where is bob?": [tool_call("ask", {}, id="call-ask"), text("bob is home")],
}
GATED = "think slowly"  # streams "working", waits for the model's gate, then " done"


class PromptedModel:
    """Answers by the latest user message's text: each prompt of ``scripts`` plays its own ScriptedModel; ``GATED``
    streams until ``gate`` is set (a running turn to attack); anything else is echoed (``echo: <text>``)."""

    model_id = "prompted"

    def __init__(self, scripts: dict[str, list[Step]] | None = None, gate: asyncio.Event | None = None):
        self.scripts = {prompt: ScriptedModel(steps) for prompt, steps in (scripts or SCRIPTS).items()}
        self.gate = gate

    def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        prompt = next(str(m["content"]) for m in reversed(request.messages) if m["role"] == "user")
        if prompt in self.scripts:
            return self.scripts[prompt].stream(request)
        return self._answer(prompt)

    async def _answer(self, prompt: str) -> AsyncIterator[Any]:
        if prompt == GATED:
            yield TextDelta("working")
            if self.gate is not None:
                await self.gate.wait()
            yield TextDelta(" done")
        else:
            yield TextDelta(f"echo: {prompt}")
        yield FinishEvent("stop", Usage())


class Notes(ta.Think):
    """A user's notes: the agent the attacks aim at."""

    model = PromptedModel()

    @ta.tool(needs_approval=True)
    async def wipe(self) -> str:
        """Delete every note."""
        return "all notes deleted"


class Diary(ta.Think):
    """A second class, so a name is tried under another class slug too."""

    model = PromptedModel()


def auth() -> JWTAuth:
    """The gateway's authentication: HS256 JWTs of the test's identity provider."""
    return JWTAuth(algorithms=["HS256"], key=SECRET)


def token(sub: str, *, key: str = SECRET, expires_in_s: int = 86_400, **claims: Any) -> str:
    """A JWT for ``sub`` signed by ``key`` (the identity provider's own by default)."""
    now = int(time.time())
    return jwt.encode({"sub": sub, "iat": now, "exp": now + expires_in_s, **claims}, key, algorithm="HS256")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(sub: str) -> str:
    """A token with ``alg: none`` (no signature) naming ``sub``."""
    payload = {"sub": sub, "exp": int(time.time()) + 600}
    return f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(payload).encode())}."


def tampered(signed: str, **claims: Any) -> str:
    """``signed`` with its payload's ``claims`` edited and its signature kept."""
    header, payload, signature = signed.split(".")
    original = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"{header}.{_b64(json.dumps({**original, **claims}).encode())}.{signature}"


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


# -- frames -------------------------------------------------------------------------------------------------------


def user(words: str, message_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": words}], **extra}


def chat_frame(request_id: str, *messages: dict[str, Any], **body: Any) -> str:
    full = {"messages": list(messages), "trigger": "submit-message", **body}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(full)}}
    )


def frame(kind: str, **fields: Any) -> str:
    return json.dumps({"type": f"cf_agent_{kind}", **fields})


async def receive(ws: Any, timeout_s: float = WAIT_S) -> dict[str, Any]:
    return dict(json.loads((await asyncio.wait_for(ws.receive(), timeout_s)).data))


async def until(
    ws: Any, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = WAIT_S
) -> list[dict[str, Any]]:
    """Frames up to and including the first one ``predicate`` accepts (each within ``timeout_s``)."""
    seen = []
    while True:
        seen.append(await receive(ws, timeout_s))
        if predicate(seen[-1]):
            return seen


def done(request_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["type"] == "cf_agent_use_chat_response" and f["id"] == request_id and bool(f["done"])


def continuation_done(f: dict[str, Any]) -> bool:
    return f["type"] == "cf_agent_use_chat_response" and bool(f["done"]) and f.get("continuation") is True


async def idle(ws: Any, probe: str) -> dict[str, Any]:
    """Ask for the running stream and return the answer: proves every frame sent before it was handled."""
    await ws.send_str(frame("stream_resume_request", probeId=probe))
    return (await until(ws, lambda f: f.get("probeId") == probe))[-1]


# -- names --------------------------------------------------------------------------------------------------------


def lookalikes(owner: str) -> dict[str, str]:
    """Names that look like ``owner``'s (which starts with "a" and holds an "i") but are other characters."""
    return {
        "cyrillic a": f"\u0430{owner[1:]}:notes",
        "fullwidth a": f"\uff41{owner[1:]}:notes",
        "fullwidth colon": f"{owner}\uff1anotes",
        "dotless i": owner.replace("i", "\u0131", 1) + ":notes",
        "zero-width space": f"{owner}\u200b:notes",
        "combining acute": f"{owner[:3]}\u0301{owner[3:]}:notes",
    }


def name_variants(owner: str) -> dict[str, str]:
    """URL path segments, percent-encoded as sent, that try to name ``owner``'s agents (``owner`` starts with "a")."""
    return {
        "exact": f"{owner}:notes",
        "bare": owner,
        "percent-encoded letter": f"%61{owner[1:]}:notes",
        "percent-encoded colon": f"{owner}%3Anotes",
        "percent-encoded colon, lower case": f"{owner}%3anotes",
        "capitalised": f"{owner.capitalize()}:notes",
        "upper case": f"{owner.upper()}:notes",
        "traversal": f"..%2F{owner}:notes",
        "traversal, double-encoded": f"..%252F{owner}:notes",
        "encoded slash inside": f"bob%2F..%2F{owner}:notes",
        "dot segment": f".%2F{owner}:notes",
        "trailing NUL": f"{owner}:notes%00",
        "trailing space": f"{owner}:notes%20",
        "trailing newline": f"{owner}:notes%0A",
        "trailing dot": f"{owner}:notes.",
        "second colon": f"{owner}:notes:",
        "suffix": f"{owner}:notes:x",
        **{kind: quote(name, safe=":") for kind, name in lookalikes(owner).items()},
    }
