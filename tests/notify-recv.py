#!/usr/bin/python3
# notify-recv.py NOTIFY_PATH LOG ROKD_SOCKET: a stand-in for systemd's end
# of sd_notify(3), for tests/systemd.test.  Binds a datagram socket at
# NOTIFY_PATH and appends one line per message to LOG: CLOCK_MONOTONIC in
# ns, then the message (its newlines as " | ").  On READY=1 it connects to
# ROKD_SOCKET at once and logs "connect-at-ready ok" or "... failed: why":
# READY=1 must mean the socket accepts.  Runs until killed.
import socket
import sys
import time

path, log, rokd_socket = sys.argv[1:4]
rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
rx.bind(path)
with open(log, "a", buffering=1) as out:
    out.write("listening\n")
    while True:
        msg = rx.recv(4096).decode(errors="replace")
        t = time.monotonic_ns()
        out.write("%d %s\n" % (t, msg.replace("\n", " | ")))
        if "READY=1" in msg.split("\n"):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                c.connect(rokd_socket)
                out.write("connect-at-ready ok\n")
            except OSError as e:
                out.write("connect-at-ready failed: %s\n" % e)
            finally:
                c.close()
