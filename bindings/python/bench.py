#!/usr/bin/python3
"""Benchmark of the rok binding against rokd (ISSUE 13 section 4).

    python3 bench.py [-s SOCKET] [-n N] [--aio-n N] [--depth D] [--rounds R]

Without -s it starts its own rokd (ROKD, default build/default/daemon/rokd)
on a private socket.  Measures, on the same daemon, in alternating rounds
so that a loaded machine hurts both sides alike:

  sync   sequential spawn-and-wait latency of rok.Client.run(kind="noop")
         (one request per task, as rok-load's), and of spawn().join()
         (two round trips), p50/p99;
  load   `rok-load -c 1 -d 1 -k noop` (ROK_LOAD, default
         build/default/bench/rok-load), the C client's figure;
  aio    pipelined noop throughput of rok.aio on one connection, D
         spawn-and-wait requests in flight; cpu_rate is tasks per second
         of the client's own CPU time (what it could do with a core to
         itself, rokd keeping up);
  loadp  `rok-load -c 1 -d D` on the same daemon: what the C client gets
         through one connection at the same depth (rokd's share of the
         machine sets both);
  ratio  aio rate / loadp rate, per round (each pair runs back to back):
         the asyncio client's throughput as a fraction of what one
         connection carries, which a loaded machine moves much less than
         either rate.  With its own rokd, bench.py also shows rokd's CPU
         time per task in the aio and loadp runs (its cost, the same for
         both clients).

One line per measurement (the medians over the rounds), then the goals:
asyncio >= 20,000 tasks/s, sync p50 <= 1.5 x rok-load's p50.
"""

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
# This file sits next to the source package, which lacks the generated
# rok_pb2: import the installed package, not ./rok.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

import rok  # noqa: E402
import rok.aio  # noqa: E402


def pct(sorted_us, p):
    return sorted_us[min(len(sorted_us) - 1, int(len(sorted_us) * p))]


def sync_latency(sock, n, two_trips):
    lat = []
    with rok.connect(sock) as c:
        for _ in range(n):
            t0 = time.perf_counter()
            if two_trips:
                r = c.spawn(kind="noop").join()
            else:
                r = c.run(kind="noop")
            lat.append((time.perf_counter() - t0) * 1e6)
            if not r.ok:
                raise SystemExit(f"bench: a noop task {r.describe()}")
    lat.sort()
    return {"p50": pct(lat, 0.50), "p99": pct(lat, 0.99), "max": lat[-1]}


def rok_load(sock, n, depth=1):
    exe = os.environ.get("ROK_LOAD") or os.path.join(
        TOP, "build", "default", "bench", "rok-load")
    out = subprocess.run([exe, "-s", sock, "-c", "1", "-d", str(depth),
                          "-n", str(n), "-k", "noop"], check=True,
                         capture_output=True, text=True).stdout
    f = dict(re.findall(r"(\w+)=([\d.]+)", out))
    return {"p50": float(f["p50_us"]), "p99": float(f["p99_us"]),
            "max": float(f["max_us"]), "rate": float(f["rate"]),
            "seconds": float(f["seconds"])}


async def aio_throughput(sock, n, depth):
    async with rok.aio.connect(sock) as c:
        left = n
        failed = 0

        async def worker():
            nonlocal left, failed
            while left > 0:
                left -= 1
                if not (await c.run(kind="noop")).ok:
                    failed += 1

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(depth)))
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    if failed:
        raise SystemExit(f"bench: {failed} noop tasks did not succeed")
    # cpu_rate: tasks per second of this process's CPU time, the rate the
    # client could reach if it had a core to itself and rokd kept up.
    return {"seconds": dt, "rate": n / dt, "cpu_rate": n / cpu}


def cpu_seconds(pid):
    """User + system CPU time of a process (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_cost(pid, n, run):
    """run(), and rokd's CPU microseconds per task during it (or None)."""
    c0 = cpu_seconds(pid) if pid is not None else None
    r = run()
    c1 = cpu_seconds(pid) if pid is not None else None
    r["rokd_us"] = (c1 - c0) / n * 1e6 if c0 is not None and c1 is not None \
        else None
    return r


def start_rokd():
    rokd = os.environ.get("ROKD") or os.path.join(TOP, "build", "default",
                                                  "daemon", "rokd")
    d = tempfile.mkdtemp(prefix="rok-bench-")
    sock = os.path.join(d, "rokd.sock")
    p = subprocess.Popen([rokd, "-s", sock, "-S", os.path.join(d, "state")],
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            rok.connect(sock).close()
            return p, d, sock
        except rok.ConnectionError:
            if p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("bench: rokd did not come up")
            time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-s", "--socket", help="a running rokd (default: start "
                    "one)")
    ap.add_argument("-n", type=int, default=2000,
                    help="sequential tasks per round and side")
    ap.add_argument("--aio-n", type=int, default=50000,
                    help="tasks per asyncio round")
    ap.add_argument("--depth", type=int, default=512,
                    help="asyncio requests in flight")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    proc = tmp = None
    sock = a.socket
    if sock is None:
        proc, tmp, sock = start_rokd()
    try:
        runs = {"sync": [], "sync2": [], "load": [], "aio": [], "loadp": []}
        for _ in range(a.rounds):
            runs["load"].append(rok_load(sock, a.n))
            runs["sync"].append(sync_latency(sock, a.n, False))
            runs["sync2"].append(sync_latency(sock, a.n // 2, True))
            pid = proc.pid if proc is not None else None
            runs["aio"].append(daemon_cost(pid, a.aio_n, lambda: asyncio.run(
                aio_throughput(sock, a.aio_n, a.depth))))
            runs["loadp"].append(daemon_cost(
                pid, a.aio_n, lambda: rok_load(sock, a.aio_n, a.depth)))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)

    def med(side, key):
        return statistics.median(r[key] for r in runs[side])

    for side, what in (("load", "rok-load -c 1 -d 1"),
                       ("sync", "rok.Client.run"),
                       ("sync2", "rok.Client.spawn+join")):
        print(f"{side:<5} {what:<22} n={a.n if side != 'sync2' else a.n // 2}"
              f" p50_us={med(side, 'p50'):.1f} p99_us={med(side, 'p99'):.1f}"
              f" max_us={med(side, 'max'):.1f}")
    def rokd_us(side):
        if runs[side][0]["rokd_us"] is None:
            return ""
        return f" rokd_us={med(side, 'rokd_us'):.1f}"

    def each(side):
        return ",".join(f"{r['rate']:.0f}" for r in runs[side])

    print(f"aio   rok.aio.Client.run     n={a.aio_n} depth={a.depth} "
          f"seconds={med('aio', 'seconds'):.3f} "
          f"rate={med('aio', 'rate'):.0f} "
          f"cpu_rate={med('aio', 'cpu_rate'):.0f} "
          f"client_us={1e6 / med('aio', 'cpu_rate'):.1f}{rokd_us('aio')} "
          f"rounds={each('aio')}")
    print(f"loadp rok-load -c 1 -d {a.depth:<5} n={a.aio_n} depth={a.depth} "
          f"seconds={med('loadp', 'seconds'):.3f} "
          f"rate={med('loadp', 'rate'):.0f}{rokd_us('loadp')} "
          f"rounds={each('loadp')}")
    ratios = [x["rate"] / y["rate"] for x, y in zip(runs["aio"],
                                                    runs["loadp"])]
    print(f"ratio aio / loadp rate       n={a.aio_n} depth={a.depth} "
          f"ratio={statistics.median(ratios):.2f} "
          f"rounds={','.join(f'{r:.2f}' for r in ratios)}")
    ratio = med("sync", "p50") / med("load", "p50")
    rate = med("aio", "rate")
    print(f"goals: aio rate {rate:.0f}/s >= 20000: "
          f"{'yes' if rate >= 20000 else 'NO'}; sync p50 / rok-load p50 = "
          f"{ratio:.2f} <= 1.5: {'yes' if ratio <= 1.5 else 'NO'} "
          f"(medians of {a.rounds} rounds; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    sys.exit(main())
