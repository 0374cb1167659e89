"""One streaming request to an OpenAI-compatible server, timed chunk by chunk.

    POST /v1/chat/completions  {"messages": [...], "stream": true, ...}  (server-side template)
    POST /v1/completions       {"prompt": "...", "stream": true, ...}

The response is server-sent events (`data: {json}` lines, `data: [DONE]` last). Each chunk with
new text is timestamped on arrival: TTFT = first text chunk − send; inter-token latencies
(ITL) are the gaps between text chunks (a speculative server may send several tokens in one
chunk, as vLLM's own benchmark also counts); TPOT = (last − first) ÷ (tokens − 1) with the token
count from the server's `usage` (`stream_options.include_usage`), else from our tokenizer.
A failure is returned, never raised: `error` is connection, timeout, http_<status> or protocol.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass, field


@dataclass
class Reply:
    text: str = ""
    completion_tokens: int | None = None  # the server's usage count
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    sent: float = 0.0  # time.perf_counter() at send
    chunk_times: list[float] = field(default_factory=list)  # arrival of each text chunk
    end: float = 0.0
    error: str | None = None
    detail: str = ""

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def itl_s(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]


def body(
    api: str,
    model: str,
    messages: list[dict],
    prompt_text: str | None,
    max_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    seed: int,
) -> dict:
    out = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if top_k:  # not in OpenAI's own API; vLLM, SGLang and llama.cpp take it
        out["top_k"] = top_k
    if api == "chat":
        out["messages"] = messages
    else:
        out["prompt"] = prompt_text
    return out


def stream(host: str, port: int, api: str, payload: dict, timeout: float) -> Reply:
    """Send one request and read its stream to the end (or to the first failure)."""
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    reply = Reply()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        reply.sent = time.perf_counter()
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            reply.error = f"http_{resp.status}"
            reply.detail = resp.read(500).decode("utf-8", "replace")
            return reply
        _read_events(resp, api, reply)
    except (socket.timeout, TimeoutError):
        reply.error, reply.detail = "timeout", f"no answer within {timeout:g} s"
    except (ConnectionError, OSError, http.client.HTTPException) as e:
        reply.error, reply.detail = "connection", f"{type(e).__name__}: {e}"
    finally:
        reply.end = time.perf_counter()
        conn.close()
    return reply


def _read_events(resp, api: str, reply: Reply) -> None:
    done = False
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            reply.error, reply.detail = "protocol", f"not JSON: {data[:200]}"
            return
        if "error" in event:  # an error reported inside the stream
            reply.error, reply.detail = "http_500", json.dumps(event["error"])[:500]
            return
        for choice in event.get("choices") or []:
            piece = (
                (choice.get("delta") or {}).get("content") if api == "chat" else choice.get("text")
            )
            if piece:
                reply.chunk_times.append(time.perf_counter())
                reply.text += piece
            if choice.get("finish_reason"):
                reply.finish_reason = choice["finish_reason"]
        usage = event.get("usage")
        if usage:
            reply.completion_tokens = usage.get("completion_tokens")
            reply.prompt_tokens = usage.get("prompt_tokens")
    if not done:
        reply.error, reply.detail = "protocol", "stream ended without [DONE]"
