"""A local HTTP(S) server for the image-fetching tests (tests/images/test_image_http.cpp).

Listens on 127.0.0.1, a port the system picks, and writes that port and a newline to READY_FILE once it listens.
With --tls it serves https with a self-signed certificate made by the openssl command (which a client verifying
against the system's store must refuse). Standard library only; stops on SIGTERM.

Paths:
  /image.jpg       the --image file, image/jpeg, with Content-Length
  /delayed.jpg     the same after 0.5 s
  /redirect        302 to image.jpg (a relative Location)
  /redirect-abs    301 to http://127.0.0.1:PORT/image.jpg (an absolute one)
  /loop            302 to /loop, forever
  /missing         404
  /big             200 with Content-Length of 1 MiB, and the bytes
  /big-chunked     200, chunked, no length: 1 MiB in 16 KiB chunks
  /slow            200 with Content-Length 1000, then one byte every 0.2 s
  /silent          nothing at all for 60 s
"""

import argparse
import http.server
import os
import ssl
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    image = b""

    def log_message(self, *args):
        pass

    def send_bytes(self, body, content_type="image/jpeg"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, code, location):
        self.send_response(code)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        path = self.path.split("?")[0]
        try:
            if path == "/image.jpg":
                self.send_bytes(self.image)
            elif path == "/delayed.jpg":
                time.sleep(0.5)
                self.send_bytes(self.image)
            elif path == "/redirect":
                self.redirect(302, "image.jpg")
            elif path == "/redirect-abs":
                self.redirect(301, "http://127.0.0.1:%d/image.jpg" % self.server.server_address[1])
            elif path == "/loop":
                self.redirect(302, "/loop")
            elif path == "/big":
                self.send_bytes(b"\xff" * MIB)
            elif path == "/big-chunked":
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"\xff" * (16 << 10)
                for _ in range(MIB // len(chunk)):
                    self.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            elif path == "/slow":
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b"\xff")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif path == "/silent":
                time.sleep(60)
            else:
                self.send_error(404)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client gave up, as the bounded tests mean it to


def self_signed_context(folder):
    key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", key, "-out", cert], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ready_file")
    parser.add_argument("--image", required=True)
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    with open(args.image, "rb") as f:
        Handler.image = f.read()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with tempfile.TemporaryDirectory() as folder:
        if args.tls:
            server.socket = self_signed_context(folder).wrap_socket(server.socket, server_side=True)
        with open(args.ready_file + ".tmp", "w") as f:
            f.write("%d\n" % server.server_address[1])
        os.replace(args.ready_file + ".tmp", args.ready_file)
        server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
