#!/usr/bin/env python3
"""An HTTP/3 client on aioquic (independent of quinn and peregrine), for
peregrine's interoperability tests: GETs each URL in turn on one connection
and prints one JSON line per URL: {"url", "status", "bytes", "sha256",
"seconds"}. Exits 1 when a request fails or does not answer 200."""
import argparse
import asyncio
import hashlib
import json
import ssl
import sys
import time
from urllib.parse import urlparse

from aioquic.asyncio import QuicConnectionProtocol
from aioquic.asyncio.client import connect
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._http = H3Connection(self._quic)
        self._streams = {}

    def quic_event_received(self, event):
        for ev in self._http.handle_event(event):
            st = self._streams.get(getattr(ev, "stream_id", None))
            if st is None:
                continue
            if isinstance(ev, HeadersReceived):
                st["status"] = int(dict(ev.headers).get(b":status", b"0"))
            elif isinstance(ev, DataReceived):
                st["hash"].update(ev.data)
                st["bytes"] += len(ev.data)
            if getattr(ev, "stream_ended", False) and not st["done"].done():
                st["done"].set_result(None)

    async def get(self, url):
        u = urlparse(url)
        sid = self._quic.get_next_available_stream_id()
        st = {
            "status": 0,
            "bytes": 0,
            "hash": hashlib.sha256(),
            "done": asyncio.get_running_loop().create_future(),
        }
        self._streams[sid] = st
        self._http.send_headers(
            sid,
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", u.netloc.encode()),
                (b":path", (u.path or "/").encode()),
            ],
            end_stream=True,
        )
        self.transmit()
        await st["done"]
        return st


async def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("urls", nargs="+", help="https://ADDR:PORT/PATH (one server)")
    p.add_argument("--ca", help="trust this certificate (PEM)")
    p.add_argument("--insecure", action="store_true", help="do not verify the server")
    p.add_argument("--timeout", type=float, default=120, help="seconds for all downloads")
    a = p.parse_args()
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    if a.insecure:
        cfg.verify_mode = ssl.CERT_NONE
    elif a.ca:
        cfg.load_verify_locations(a.ca)
    first = urlparse(a.urls[0])
    ok = True
    async with connect(
        first.hostname, first.port or 443, configuration=cfg, create_protocol=Client
    ) as client:
        for url in a.urls:
            t0 = time.monotonic()
            st = await asyncio.wait_for(client.get(url), a.timeout)
            out = {
                "url": url,
                "status": st["status"],
                "bytes": st["bytes"],
                "sha256": st["hash"].hexdigest(),
                "seconds": round(time.monotonic() - t0, 6),
            }
            print(json.dumps(out), flush=True)
            ok &= st["status"] == 200
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    asyncio.run(main())
