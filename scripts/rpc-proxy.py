#!/usr/bin/env python3
"""A counting TCP proxy for ggml RPC links, on loopback only.

    python3 scripts/rpc-proxy.py HOST:PORT [HOST:PORT ...] [--lifetime SECONDS]

For each upstream server it listens on a free 127.0.0.1 port and forwards
every connection made there to that server, byte for byte, counting:

- bytes client -> server ("sent") and server -> client ("received");
- round trips: each time the server sends bytes after the client sent some
  (a change of direction server -> client after client -> server data).

A request and its answer are one round trip; requests without an answer
(ggml RPC's set_tensor, graph_compute, ...) sent back to back before the
next answer add none; answers that arrive together count once. Both ggplan
and llama.cpp's RPC client are measured this way, on the same wire.

It prints one line per upstream, "proxy UPSTREAM 127.0.0.1:PORT", then
"control 127.0.0.1:PORT", and flushes. A connection to the control port
receives the counters so far as one JSON line and is closed:

    {"links": [{"upstream": ..., "listen": ..., "sent": ..., "received": ...,
                "round_trips": ..., "connections": ...}, ...]}

Differences of two readings give the traffic of what ran between them. The
proxy exits when its standard input closes (so it never outlives the
process that started it with a pipe there) or after --lifetime seconds
(default 3600); from a shell, give it a pipe that stays open:

    sleep 600 | python3 scripts/rpc-proxy.py 127.0.0.1:50052 &
"""

import argparse
import json
import socket
import sys
import threading

CHUNK = 1 << 20


class Link:
    """Counters of one upstream server, over all its connections."""

    def __init__(self, upstream, listen):
        self.upstream = upstream
        self.listen = listen
        self.lock = threading.Lock()
        self.sent = 0
        self.received = 0
        self.round_trips = 0
        self.connections = 0

    def reading(self):
        with self.lock:
            return {
                "upstream": self.upstream,
                "listen": self.listen,
                "sent": self.sent,
                "received": self.received,
                "round_trips": self.round_trips,
                "connections": self.connections,
            }


def pump(src, dst, link, state, to_server):
    """Forwards src -> dst until end of file or an error. Counts before
    forwarding, so an answer can never be counted before its request."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            with link.lock:
                if to_server:
                    link.sent += len(data)
                    state["last"] = "client"
                else:
                    link.received += len(data)
                    if state["last"] == "client":
                        link.round_trips += 1
                    state["last"] = "server"
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)  # pass the end of file on
    except OSError:
        for s in (src, dst):  # one side failed: end both directions
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listener, link):
    host, port = link.upstream.rsplit(":", 1)
    while True:  # ends with the process
        client, _ = listener.accept()
        try:
            server = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            client.close()
            continue
        server.settimeout(None)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with link.lock:
            link.connections += 1
        state = {"last": None}
        ends = [
            threading.Thread(target=pump, args=(client, server, link, state, True), daemon=True),
            threading.Thread(target=pump, args=(server, client, link, state, False), daemon=True),
        ]
        for t in ends:
            t.start()
        threading.Thread(target=close_after, args=(ends, client, server), daemon=True).start()


def close_after(threads, *sockets):
    for t in threads:
        t.join()
    for s in sockets:
        s.close()


def control(listener, links):
    while True:  # ends with the process
        conn, _ = listener.accept()
        with conn:
            reading = {"links": [link.reading() for link in links]}
            try:
                conn.sendall((json.dumps(reading) + "\n").encode())
            except OSError:
                pass


def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s, "127.0.0.1:%d" % s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstreams", nargs="+", metavar="HOST:PORT")
    parser.add_argument("--lifetime", type=float, default=3600.0)
    args = parser.parse_args()
    links = []
    for upstream in args.upstreams:
        host = upstream.rsplit(":", 1)[0]
        if host not in ("127.0.0.1", "localhost"):
            parser.error("loopback servers only: %s" % upstream)
        listener, where = listen()
        link = Link(upstream, where)
        links.append(link)
        threading.Thread(target=serve, args=(listener, link), daemon=True).start()
        print("proxy %s %s" % (upstream, where))
    listener, where = listen()
    threading.Thread(target=control, args=(listener, links), daemon=True).start()
    print("control %s" % where, flush=True)
    # Until the parent closes our stdin (or dies), at most --lifetime seconds.
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(args.lifetime)


if __name__ == "__main__":
    main()
