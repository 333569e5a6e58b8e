"""Behind a load balancer (proxies.c): trusted_proxies, the PROXY protocol v2
header and X-Forwarded-For, through the real gateway.  The harness talks to
the gateway from 127.0.0.1 (untrusted); the "balancer" is 127.0.0.2, a
trusted range, which must start each connection with a PROXY v2 header."""

import json
import socket
import struct
import unittest

from moat_harness import Stack, wait_until

SIG = b"\r\n\r\n\x00\r\nQUIT\n"
BALANCER = "127.0.0.2"
CONFIG = """trusted_proxies: [127.0.0.2/32, 10.0.0.0/8]
proxy_protocol: true
max_connections_per_address: 2
unauthenticated: {per_second: 0.001, burst: 2}
"""


def proxy_v2(client=None, port=40000):
    """A PROXY v2 header naming client (IPv4), or a LOCAL one."""
    if client is None:
        return SIG + bytes([0x20, 0x00, 0, 0])
    body = socket.inet_aton(client) + socket.inet_aton("127.0.0.1") + struct.pack("!HH", port, 443)
    return SIG + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body


class ProxiesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(extra_config=CONFIG).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def connect(self, header, source=BALANCER):
        raw = socket.create_connection(("127.0.0.1", self.stack.port), timeout=30, source_address=(source, 0))
        if header:
            raw.sendall(header)
        return self.stack.ssl_context(alpn=("http/1.1",)).wrap_socket(raw, server_hostname="127.0.0.1")

    def request(self, header, path="/api/v2/runtimes", token="default", xff=None, source=BALANCER):
        """One request on a connection of its own; (status, headers, body)."""
        h = {"Host": "127.0.0.1", "Connection": "close"}
        if token:
            h["Authorization"] = "Bearer " + (self.stack.token if token == "default" else token)
        if xff is not None:
            h["X-Forwarded-For"] = xff
        with self.connect(header, source) as s:
            s.sendall(("GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n").encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict((k.lower(), v.strip()) for k, _, v in (l.partition(":") for l in lines[1:]))
        return int(lines[0].split()[1]), headers, body

    def client_of(self, request_id):
        def found():
            for r in self.stack.audit_records():
                if r.get("request_id") == request_id:
                    return {"client": r["client"]}  # truthy even when the client is empty
            return None
        return wait_until(found, "the record of " + request_id)["client"]

    def test_proxy_header_names_the_client(self):
        st, h, body = self.request(proxy_v2("203.0.113.9"))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.client_of(h["x-request-id"]), "203.0.113.9")
        self.assertIn("id=%s tenant=" % h["x-request-id"], self.stack.log("gateway"))
        self.assertIn("client=203.0.113.9", self.stack.log("gateway"))

    def test_local_header_keeps_the_balancer(self):
        st, h, body = self.request(proxy_v2(None))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.client_of(h["x-request-id"]), BALANCER)

    def test_trusted_peer_without_a_header_is_closed(self):
        with self.assertRaises((ssl_errors())):
            self.request(b"")  # straight TLS from the balancer: no PROXY header
        with self.assertRaises((ssl_errors())):
            self.request(b"PROXY TCP4 203.0.113.9 127.0.0.1 1 443\r\n")  # v1 is not taken
        self.assertIn("closing a connection from trusted proxy 127.0.0.2", self.stack.log("gateway"))

    def test_untrusted_peer_cannot_send_a_header(self):
        # from 127.0.0.1 a PROXY header is just bytes before the TLS handshake: the handshake fails
        with self.assertRaises((ssl_errors())):
            self.request(proxy_v2("203.0.113.9"), source="127.0.0.1")

    def test_forwarded_for_rightmost_untrusted_hop(self):
        st, h, body = self.request(proxy_v2(None), xff="1.1.1.1, 198.51.100.7, 10.2.3.4")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.client_of(h["x-request-id"]), "198.51.100.7")

    def test_spoofed_forwarded_for_from_untrusted_changes_nothing(self):
        st, h, body = self.stack.request("GET", "/api/v2/runtimes", headers={"X-Forwarded-For": "198.51.100.99"})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.client_of(h["x-request-id"]), "127.0.0.1")
        self.assertIn("X-Forwarded-For from 127.0.0.1 ignored", self.stack.log("gateway"))
        # nor does it move refusals to another address's budget: a fresh address would have its burst
        for _ in range(3):
            st, h, body = self.stack.request("GET", "/api/v2/runtimes", token="moat_bad",
                                             headers={"X-Forwarded-For": "198.51.100.%d" % _})
        self.assertEqual(st, 429)

    def test_refusals_are_charged_to_the_forwarded_client(self):
        # burst 2 per address: the third refusal for one client is 429, another client still gets its 401s
        seen = [self.request(proxy_v2(None), token="moat_bad", xff="192.0.2.1")[0] for _ in range(3)]
        self.assertEqual(seen, [401, 401, 429])
        self.assertEqual(self.request(proxy_v2(None), token="moat_bad", xff="192.0.2.2")[0], 401)

    def test_connection_cap_follows_the_named_client(self):
        # max_connections_per_address 2: the balancer carries any number, each client at most 2
        held = [self.connect(proxy_v2("203.0.113.50")) for _ in range(2)]
        held += [self.connect(proxy_v2("203.0.113.%d" % (60 + i))) for i in range(3)]
        try:
            with self.assertRaises((ssl_errors())):
                with self.connect(proxy_v2("203.0.113.50")) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    if not s.recv(1):
                        raise ConnectionResetError("closed")
            self.assertIn("refused a connection from 203.0.113.50: max_connections_per_address",
                          self.stack.log("gateway"))
        finally:
            for s in held:
                s.close()


def ssl_errors():
    import ssl
    return (ssl.SSLError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError, OSError)


if __name__ == "__main__":
    unittest.main()
