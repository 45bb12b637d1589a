"""A header-injecting reverse proxy for tools that cannot send credentials (conformance suite, Inspector).

It adds `Authorization: Bearer <token>` to every request and forwards everything else unchanged, Host
and Origin included, streaming bodies both ways so SSE passes through as it is produced. It never
weakens the server's authentication: the server still checks the token, Origin and Host.

    python -m tests.tools.auth_proxy --listen 8201 --target http://127.0.0.1:8200 --token-file F
"""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
import uvicorn

HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"content-length"}


def make_app(target: str, token: str):
    client = httpx.AsyncClient(base_url=target, timeout=httpx.Timeout(30.0, read=None))

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = bytearray()
        while True:
            message = await receive()
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        # A field value excludes the whitespace around it (RFC 9110, section 5.5); the HTTP library refuses to send
        # a value that keeps it, so it is trimmed here as the server would trim it.
        headers = [
            (k, v.strip(b" \t"))
            for k, v in scope["headers"]
            if k.lower() not in HOP_BY_HOP and k.lower() != b"authorization"
        ]
        headers.append((b"authorization", f"Bearer {token}".encode()))
        path = scope["raw_path"].decode() + (("?" + scope["query_string"].decode()) if scope["query_string"] else "")
        request = client.build_request(scope["method"], path, headers=headers, content=bytes(body))
        try:
            response = await client.send(request, stream=True)
        except httpx.TransportError:
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b"upstream unreachable"})
            return
        try:
            out = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except (httpx.TransportError, OSError):
            pass  # the client or the server went away mid-stream; nothing left to relay
        finally:
            await response.aclose()

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    args = parser.parse_args()
    app = make_app(args.target, args.token_file.read_text().strip())
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.listen,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()
