"""A Piston interactive-session client for the tests and benchmarks, on
Debian's python3-websockets (a real third-party WebSocket client).

Everything is asyncio; `run(coro)` runs one coroutine to its end."""

import asyncio
import json
import time

import websockets


def run(coro):
    return asyncio.run(coro)


def ws_url(stack, path="/api/v2/connect"):
    return "wss://localhost:%d%s" % (stack.port, path)


async def connect(stack, token="default", path="/api/v2/connect", **kw):
    """An open WebSocket to the gateway (HTTP/1.1 over TLS, the dev CA)."""
    if token == "default":
        token = stack.token
    headers = {"Authorization": "Bearer " + token} if token else {}
    return await websockets.connect(ws_url(stack, path), ssl=stack.ssl_context(alpn=("http/1.1",)),
                                    extra_headers=headers, max_size=None, open_timeout=60, **kw)


def init_message(language, code, version="*", **extra):
    msg = {"type": "init", "language": language, "version": version, "files": [{"name": "main", "content": code}]}
    msg.update(extra)
    return json.dumps(msg)


async def recv_event(ws, timeout=120):
    """The next event as a dict, with "_at" (time.monotonic() on arrival)."""
    raw = await asyncio.wait_for(ws.recv(), timeout)
    ev = json.loads(raw)
    ev["_at"] = time.monotonic()
    return ev


async def events_until_close(ws, timeout=120):
    """Every event until the server closes; returns (events, close code, close reason)."""
    events = []
    try:
        while True:
            events.append(await recv_event(ws, timeout))
    except websockets.ConnectionClosed as e:
        return events, e.code, e.reason


async def wait_for_event(ws, pred, timeout=120):
    """Events until one satisfies pred; returns (that event, the ones before it)."""
    seen = []
    while True:
        ev = await recv_event(ws, timeout)
        if pred(ev):
            return ev, seen
        seen.append(ev)


def stream_text(events, stream="stdout"):
    return "".join(e["data"] for e in events if e.get("type") == "data" and e.get("stream") == stream)
