#!/usr/bin/env python3
"""Smart-HTTP git server for the e2e tests (fetch and push).

usage: git_http.py --port PORT --root REPOS_DIR --user USER --token-file FILE

Every request must carry HTTP Basic auth USER:<token in FILE>; anything else
gets 401 with a WWW-Authenticate challenge. Authenticated requests are handed
to `git http-backend` as CGI (GIT_PROJECT_ROOT=REPOS_DIR, GIT_HTTP_EXPORT_ALL,
REMOTE_USER=USER): the request body is streamed to it (Content-Length or
chunked), its CGI headers are parsed (Status: sets the code) and its output is
streamed back with chunked encoding. Listens on 127.0.0.1 only; one thread per
connection.
"""
import argparse
import ssl
import base64
import hmac
import http.server
import os
import shutil
import subprocess
import sys
import threading


class GitHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "imagewatch-e2e-git/1"

    # Set by main().
    root = ""
    user = ""
    token_file = ""

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _authorized(self):
        h = self.headers.get("Authorization", "")
        if not h.lower().startswith("basic "):
            return False
        try:
            user, _, pw = base64.b64decode(h[6:].strip()).decode().partition(":")
        except Exception:
            return False
        with open(self.token_file) as f:
            token = f.read().strip()
        return hmac.compare_digest(user.encode(), self.user.encode()) and hmac.compare_digest(
            pw.encode(), token.encode()
        )

    def _deny(self):
        body = b"authentication required\n"
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="imagewatch-e2e git"')
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body_chunks(self):
        """Yield the request body, de-chunking if needed."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    # Trailers until blank line.
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                remaining = size
                while remaining:
                    data = self.rfile.read(min(remaining, 65536))
                    if not data:
                        return
                    remaining -= len(data)
                    yield data
                self.rfile.readline()  # CRLF after chunk
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining > 0:
                data = self.rfile.read(min(remaining, 65536))
                if not data:
                    return
                remaining -= len(data)
                yield data

    def _cgi(self):
        if not self._authorized():
            # Drain a small body so the connection stays usable.
            for _ in self._body_chunks():
                pass
            self._deny()
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "SERVER_SOFTWARE": self.server_version,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": str(self.server.server_address[1]),
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": self.user,
            "AUTH_TYPE": "Basic",
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "HOME": os.environ.get("HOME", "/tmp"),
        }
        if self.headers.get("Content-Type"):
            env["CONTENT_TYPE"] = self.headers["Content-Type"]
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        if not chunked and self.headers.get("Content-Length"):
            env["CONTENT_LENGTH"] = self.headers["Content-Length"]
        for name in ("Content-Encoding", "Git-Protocol", "Accept", "User-Agent"):
            if self.headers.get(name):
                env["HTTP_" + name.upper().replace("-", "_")] = self.headers[name]

        proc = subprocess.Popen(
            ["git", "http-backend"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr
        )

        def feed():
            try:
                for data in self._body_chunks():
                    proc.stdin.write(data)
            except (BrokenPipeError, ValueError):
                pass
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()

        # CGI response headers.
        status, headers = 200, []
        while True:
            line = proc.stdout.readline()
            if not line or line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode("latin-1").rstrip("\r\n").partition(":")
            value = value.strip()
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value))
        self.send_response(status)
        has_length = False
        for name, value in headers:
            if name.lower() == "content-length":
                has_length = True
            self.send_header(name, value)
        if not has_length:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            data = proc.stdout.read1(65536)
            if not data:
                break
            if has_length:
                self.wfile.write(data)
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        if not has_length:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        feeder.join()
        proc.wait()

    do_GET = _cgi
    do_POST = _cgi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate")
    ap.add_argument("--tls-key", help="private key of --tls-cert")
    a = ap.parse_args()
    if not shutil.which("git"):
        sys.exit("git not found")
    GitHandler.root = os.path.abspath(a.root)
    GitHandler.user = a.user
    GitHandler.token_file = os.path.abspath(a.token_file)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), GitHandler)
    srv.daemon_threads = True
    scheme = "http"
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        scheme = "https"
    sys.stderr.write("git %s server on %s://127.0.0.1:%d/ root=%s\n" % (scheme, scheme, a.port, GitHandler.root))
    sys.stderr.flush()
    srv.serve_forever()


if __name__ == "__main__":
    main()
