#!/usr/bin/env python3
"""The HTTP front's memory under clients that post large bodies and never read the answers (issue 50 §2).

Starts `flowline serve` on a NoOp flow (its answer echoes every document, so an answer is as large as its
request), opens --connections connections that each post one Jina /post body of --body-mb MB and then
never read, and samples the server's resident memory from /proc/<pid>/status (VmRSS; VmHWM is the peak)
for --seconds. Prints one JSON object: the options, the idle RSS, the peak RSS, the RSS at the end, the bound the gateway
documents (max_in_flight x max_body_bytes) and how the posts ended (sent whole, or stopped by the server).

  bench/gateway_memory.py build/src/flowline --connections 80 --body-mb 30
  bench/gateway_memory.py build/src/flowline --connections 40 --body-mb 3.5 --max-body-mb 4 --max-in-flight 8 \
      --seconds 10 --check-bound 2   # the ctest case: exit 1 when the peak passes idle + 2 x the bound, or
                                     # GET /health on a new connection does not answer 200 under the load

With --idle-after-answer each client instead posts until it is answered 200 (a 503 from the bound: it connects
again 0.1 s later), reads the whole answer and keeps its connection open, idle, until the end; --check-bound then
checks the RSS at the end, once every client sits idle: what the process keeps for connections that have
nothing in the flow and nothing unread (before the fix, each kept its last body and answer).

  bench/gateway_memory.py build/src/flowline --idle-after-answer --connections 16 --body-mb 3.5 --max-body-mb 4 \
      --max-in-flight 8 --seconds 15 --check-bound 1   # the ctest case (exit 1 too unless every client was answered)

With --grpc the clients are Jina's gRPC protocol instead (jina.JinaRPC/Call streams through grpcio, run it
with .venv-clients/bin/python): each of --connections streams sends messages of --body-mb MB (Jina's own
DataRequest, serialized once) for --seconds and never reads an answer; the server's gRPC port is picked
here. "posts" then counts how each stream ended (RESOURCE_EXHAUSTED, open, ...).

  .venv-clients/bin/python bench/gateway_memory.py build/src/flowline --grpc --connections 30 --body-mb 30
  .venv-clients/bin/python bench/gateway_memory.py build/src/flowline --grpc --connections 30 --body-mb 3 \
      --max-body-mb 4 --max-in-flight 8 --seconds 12 --check-bound 1 --expect-refusals   # the ctest case

The HTTP mode needs only the standard library: it runs with any python3.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def rss_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


def health_status(port):
    """GET /health on a new connection while the loaded ones stay open: its status (0: no answer in 10 s)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = s.recv(64).decode("latin-1")
            return int(head.split()[1]) if head.startswith("HTTP/1.1 ") else 0
    except (OSError, ValueError, IndexError):
        return 0


def request_outcomes(port):
    """flowline_requests_total by front and outcome, from /metrics ({"grpc ok": 12, "http busy": 3, ...})."""
    out = {}
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            text = b""
            while chunk := s.recv(65536):
                text += chunk
    except OSError:
        return out
    for line in text.decode("latin-1").splitlines():
        if line.startswith("flowline_requests_total{"):
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
            key = f'{labels.get("front", "").strip(chr(34))} {labels.get("outcome", "").strip(chr(34))}'
            out[key] = out.get(key, 0) + int(float(line.split()[-1]))
    return out


def body_of(size):
    """A Jina /post body of about `size` bytes: documents of 64 KiB texts."""
    text = "x" * 65536
    doc = '{"text":"' + text + '"}'
    count = max(1, size // (len(doc) + 1))
    return ('{"execEndpoint":"/","data":[' + ",".join([doc] * count) + "]}").encode()


def post_and_never_read(port, body, outcome, index, deadline):
    """Sends the request and as much of the body as the server takes before `deadline`, never reading."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as e:
        outcome[index] = f"connect failed: {e}"
        return
    header = (f"POST /post HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n").encode()
    s.settimeout(1.0)
    view = memoryview(header + body)
    sent = 0
    while sent < len(view) and time.monotonic() < deadline:
        try:
            sent += s.send(view[sent:sent + (1 << 20)])
        except socket.timeout:
            continue  # the server is not reading: keep trying until the deadline
        except OSError as e:
            outcome[index] = f"closed after {sent} bytes: {e.__class__.__name__}"
            return
    outcome[index] = "sent" if sent == len(view) else f"stalled after {sent} bytes"
    # Keep the socket open and unread until the sampling ends.
    outcome[f"socket{index}"] = s


def read_answer(s):
    """The status of the HTTP answer on `s`, its body read whole (Content-Length; flowline's /post answers)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the answer's header")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(l.split(":", 1)[1]) for l in lines if l.lower().startswith("content-length:"))
    while len(rest) < length:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed after {len(rest)} of the answer's {length} bytes")
        rest += chunk
    return int(lines[0].split()[1])


def post_read_and_idle(port, body, outcome, index, deadline):
    """Posts until answered 200 (again after a 503), reads the answer whole and keeps the connection open, idle."""
    request = (f"POST /post HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    refused = 0
    while time.monotonic() < deadline:
        s = None
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.settimeout(max(1.0, deadline - time.monotonic()))
            s.sendall(request)
            status = read_answer(s)
        except (OSError, ValueError, StopIteration):
            status = 0  # refused before the body was read: the server answered and closed
        if status == 200:
            outcome[index] = "answered, then idle"
            outcome[f"socket{index}"] = s
            return
        refused += 1
        if s:
            s.close()
        time.sleep(0.1)
    outcome[index] = f"never answered ({refused} tries)"


def grpc_message(size):
    """A serialized Jina DataRequest for the NoOp flow of about `size` bytes (64 KiB texts)."""
    from docarray import DocList
    from docarray.documents import TextDoc
    from jina.types.request.data import DataRequest
    text = "x" * 65536
    r = DataRequest()
    r.header.exec_endpoint = "/"
    r.document_array_cls = DocList[TextDoc]
    r.data.docs = DocList[TextDoc]([TextDoc(text=text) for _ in range(max(1, size // (len(text) + 40)))])
    return r.proto.SerializeToString()


def grpc_stream_never_read(port, message, outcome, index, deadline):
    """One jina.JinaRPC/Call stream sending `message` until `deadline`, its answers never read."""
    import grpc
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)])
    sent = [0]

    def requests():
        while time.monotonic() < deadline:
            sent[0] += 1
            yield message

    call = channel.stream_stream("/jina.JinaRPC/Call", request_serializer=None, response_deserializer=None)(
        requests())
    # Never reads an answer: waits for the stream's end (the status) or the deadline.
    done = threading.Event()
    call.add_done_callback(lambda _: done.set())
    done.wait(max(0.0, deadline - time.monotonic()))
    outcome[index] = call.code().name if done.is_set() else "open"
    outcome[f"sent{index}"] = sent[0]
    outcome[f"socket{index}"] = channel


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("flowline", help="the flowline binary")
    ap.add_argument("--connections", type=int, default=80)
    ap.add_argument("--body-mb", type=float, default=30.0)
    ap.add_argument("--max-body-mb", type=float, default=32.0, help="--max-body-bytes, in MiB")
    ap.add_argument("--max-in-flight", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the clients post and the RSS is sampled")
    ap.add_argument("--grpc", action="store_true", help="Jina's gRPC streams instead of HTTP posts")
    ap.add_argument("--grpc-memory-mb", type=float, default=1024.0,
                    help="--grpc-memory-bytes, in MiB (gRPC's own buffers; added to the bound with --grpc)")
    ap.add_argument("--idle-after-answer", action="store_true",
                    help="clients read their answer and stay connected, idle; --check-bound checks the RSS at the end")
    ap.add_argument("--expect-refusals", action="store_true",
                    help="exit 1 unless the server refused some requests as too large (413, RESOURCE_EXHAUSTED)")
    ap.add_argument("--check-bound", type=float, default=0.0,
                    help="exit 1 when the peak RSS passes the idle RSS + this many times the bound")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        flow = os.path.join(tmp, "flow.yml")
        with open(flow, "w") as f:
            f.write("executors:\n  - name: echo\n    uses: NoOp\n")
        ready = os.path.join(tmp, "port")
        max_body = int(args.max_body_mb * (1 << 20))
        grpc_port = free_port() if args.grpc else 0
        server = subprocess.Popen(
            [args.flowline, "serve", flow, "--port", "0", "--ready-file", ready, "--threads", str(args.threads),
             "--max-body-bytes", str(max_body), "--max-in-flight", str(args.max_in_flight),
             "--request-timeout", str(int(args.seconds * 1000) + 60000)]
            + (["--grpc-port", str(grpc_port), "--grpc-memory-bytes", str(int(args.grpc_memory_mb * (1 << 20)))]
               if args.grpc else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            started = time.monotonic()
            while not (os.path.exists(ready) and open(ready).read().strip()):
                if server.poll() is not None or time.monotonic() - started > 60:
                    sys.exit(f"flowline serve did not start: {server.stderr.read().decode()[-2000:]}")
                time.sleep(0.05)
            port = int(open(ready).read().split()[0])
            idle = rss_kib(server.pid, "VmRSS")
            body = grpc_message(int(args.body_mb * 1e6)) if args.grpc else body_of(int(args.body_mb * 1e6))
            outcome = {}
            deadline = time.monotonic() + args.seconds
            client, target = ((grpc_stream_never_read, grpc_port) if args.grpc else
                              (post_read_and_idle, port) if args.idle_after_answer else (post_and_never_read, port))
            threads = [threading.Thread(target=client, args=(target, body, outcome, i, deadline))
                       for i in range(args.connections)]
            for t in threads:
                t.start()
            peak = idle
            while time.monotonic() < deadline:
                if server.poll() is not None:
                    break
                peak = max(peak, rss_kib(server.pid, "VmRSS"))
                time.sleep(0.05)
            for t in threads:
                t.join()
            alive = server.poll() is None
            end = rss_kib(server.pid, "VmRSS") if alive else 0
            health = health_status(port) if alive else 0
            outcomes = request_outcomes(port) if alive else {}
            if alive:
                peak = max(peak, rss_kib(server.pid, "VmHWM"))
            ends = {}
            for i in range(args.connections):
                key = str(outcome.get(i, "none")).split(" after")[0]
                ends[key] = ends.get(key, 0) + 1
            # The front's bound; with --grpc gRPC's resource quota over its own buffers comes on top.
            bound = args.max_in_flight * max_body + (int(args.grpc_memory_mb * (1 << 20)) if args.grpc else 0)
            result = {
                "front": "grpc" if args.grpc else "http",
                "messages_sent": sum(v for k, v in outcome.items() if str(k).startswith("sent")),
                "connections": args.connections, "body_bytes": len(body), "max_body_bytes": max_body,
                "max_in_flight": args.max_in_flight, "threads": args.threads, "seconds": args.seconds,
                "bound_mib": round(bound / (1 << 20), 1), "idle_rss_mib": round(idle / 1024, 1),
                "peak_rss_mib": round(peak / 1024, 1),
                "end_rss_mib": round(end / 1024, 1), "health_after": health, "requests": outcomes, "server_alive": alive, "posts": ends,
            }
            print(json.dumps(result))
            for key, s in list(outcome.items()):
                if str(key).startswith("socket"):
                    s.close()
            if not alive:
                sys.exit(f"flowline serve died: {server.stderr.read().decode()[-2000:]}")
            if args.expect_refusals and not any(k.endswith(" too_large") for k in outcomes):
                sys.exit(f"no request was refused as too large under the load: {outcomes}")
            if args.check_bound and health != 200:
                sys.exit(f"GET /health under the load answered {health or 'nothing'}")
            if args.idle_after_answer and args.check_bound:
                unanswered = [i for i in range(args.connections) if outcome.get(i) != "answered, then idle"]
                if unanswered:
                    sys.exit(f"{len(unanswered)} clients were never answered within {args.seconds} s: "
                             f"{outcome.get(unanswered[0])}")
                if end * 1024 > idle * 1024 + args.check_bound * bound:
                    sys.exit(f"RSS {end / 1024:.0f} MiB with every client answered and idle passes idle "
                             f"{idle / 1024:.0f} MiB + {args.check_bound} x the bound ({bound / (1 << 20):.0f} MiB)")
            elif args.check_bound and peak * 1024 > idle * 1024 + args.check_bound * bound:
                sys.exit(f"peak RSS {peak / 1024:.0f} MiB passes idle {idle / 1024:.0f} MiB + "
                         f"{args.check_bound} x the bound ({bound / (1 << 20):.0f} MiB)")
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
