#!/usr/bin/env python3
"""An HTTP/3 file server on aioquic (an implementation independent of quinn
and peregrine), for peregrine's interoperability tests: GET /NAME answers
the bytes of DIR/NAME (404 when there is no such file). Prints one line
"listening HOST PORT" once it serves. Without --cert/--key it makes a
self-signed certificate for --name (and its IP address) and writes it to
--cert-out, so a client can trust exactly it."""
import argparse
import asyncio
import datetime
import ipaddress
import os
import sys

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated


def self_signed(name, cert_out, key_out):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    alt = []
    try:
        alt.append(x509.IPAddress(ipaddress.ip_address(name)))
    except ValueError:
        alt.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .sign(key, hashes.SHA256())
    )
    with open(cert_out, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_out, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


class FileServer(QuicConnectionProtocol):
    root = "."

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._http = None

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self._http = H3Connection(self._quic)
        if self._http is None:
            return
        for ev in self._http.handle_event(event):
            if isinstance(ev, HeadersReceived):
                self._answer(ev)

    def _answer(self, ev):
        headers = dict(ev.headers)
        path = headers.get(b":path", b"/").decode()
        name = os.path.basename(path.split("?", 1)[0])
        full = os.path.join(self.root, name)
        if headers.get(b":method") != b"GET" or not name or not os.path.isfile(full):
            self._http.send_headers(ev.stream_id, [(b":status", b"404")], end_stream=True)
        else:
            with open(full, "rb") as f:
                body = f.read()
            self._http.send_headers(
                ev.stream_id,
                [(b":status", b"200"), (b"content-length", str(len(body)).encode())],
                end_stream=not body,
            )
            if body:
                self._http.send_data(ev.stream_id, body, end_stream=True)
        self.transmit()


async def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", required=True, help="address to listen on")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dir", required=True, help="directory of the files served")
    p.add_argument("--cert", help="certificate (PEM); with --key")
    p.add_argument("--key", help="private key (PEM)")
    p.add_argument("--name", help="name (or IP) of the generated certificate; default --host")
    p.add_argument("--cert-out", help="where the generated certificate is written")
    p.add_argument("--duration", type=float, default=600, help="seconds before it exits")
    a = p.parse_args()
    if not a.cert:
        if not a.cert_out:
            p.error("without --cert, --cert-out is needed (where to write the generated one)")
        a.cert, a.key = a.cert_out, a.cert_out + ".key"
        self_signed(a.name or a.host, a.cert, a.key)
    cfg = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, max_datagram_frame_size=None)
    cfg.load_cert_chain(a.cert, a.key)
    FileServer.root = a.dir
    await serve(a.host, a.port, configuration=cfg, create_protocol=FileServer)
    print("listening", a.host, a.port, flush=True)
    await asyncio.sleep(a.duration)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
