"""rok.aio against real rokd processes: the same calls as coroutines,
pipelining on one connection, cancellation, streams, a dying daemon."""

import asyncio
import threading

import pytest

import rok
import rok.aio

from conftest import WAIT


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT))


def test_every_call(rokd, tmp_path):
    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            assert c.server.protocol_version == rok.PROTOCOL_VERSION
            assert await c.ping(b"p") >= 0
            t = await c.spawn(["sh", "-c", "echo out; exit 2"],
                              cwd=str(tmp_path))
            r = await t.join()
            assert r.exit_code == 2 and r.state == "failed"
            assert [x async for x in t.logs()] == [(rok.STDOUT, b"out\n")]
            assert (await t.status()).state == "failed"
            assert (await c.run(kind="echo", args=[b"\xff"])).value == b"\xff"
            s = await c.spawn(kind="sleep", args=["1h"])
            with pytest.raises(rok.TimedOut):
                await s.join(timeout=0.05)
            n = await c.spawn(kind="noop")
            i, w = await c.race([s, n], cancel_rest=True)
            assert i == 1 and w.id == n.id
            assert (await s.join()).state == "cancelled"
            i, w = await c.select([rok.Spec(kind="sleep", args=["1h"]),
                                   rok.Spec(kind="echo", args=["x"])])
            assert i == 1 and w.value == b"x"
            rs = await c.join_all([n, t])
            assert [r.id for r in rs] == [n.id, t.id]
            ids = [r.id async for r in c.list(page_size=3)]
            assert ids == sorted(ids) and t.id in ids
            assert (await c.stats())["workers"] == 2
            z = await c.spawn(kind="sleep", args=["1h"])
            await z.cancel()
            assert (await z.join()).state == "cancelled"
            with pytest.raises(rok.NotFound):
                await c.task(10**12).status()
            with pytest.raises(rok.InvalidArgument):
                await c.spawn(kind="no-such-kind")
            h = await c.spawn(["true"], priority="high", group="default")
            r = await h.join()
            assert (r.group, r.priority) == ("default", "high")
            assert [g.name for g in await c.groups()] == ["default"]
            # what runs when: a dependency, a delay, retries
            first = await c.spawn(kind="sleep", args=["50ms"])
            then = await c.spawn(["then"], kind="echo", after=[first],
                                 delay=0.05)
            r = await then.join()
            assert r.ok and r.value == b"then"
            assert r.started_at >= (await first.join()).finished_at
            r = await (await c.spawn(kind="sleep", args=["1h"],
                                     timeout=0.01, retry_failed=2)).join()
            assert r.state == "timed_out" and r.run == 1
            assert await c.prune(keep=0) >= 1
        # plain await works too
        c = await rok.aio.connect(rokd.socket)
        await c.ping()
        await c.close()
        with pytest.raises(rok.ConnectionError):
            await c.ping()

    run(main())


def test_thousand_concurrent_spawns_on_one_connection(rokd):
    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            n = 1000
            # Sleeps of 0-29 ms in a scrambled order: the daemon answers
            # in the order they finish, not the order they were sent.
            naps = [f"{(i * 7) % 30}ms".encode() for i in range(n)]
            done_order = []

            async def one(i):
                r = await c.run(kind="sleep", args=[naps[i]])
                done_order.append(i)
                return r

            results = await asyncio.gather(*(one(i) for i in range(n)))
            # Each reply reached the coroutine that sent its request.
            assert [r.args for r in results] == [(nap,) for nap in naps]
            assert all(r.ok for r in results)
            assert len({r.id for r in results}) == n
            assert sorted(done_order) == list(range(n))
            assert (await c.stats())["connections"] >= 1

    run(main())


def test_replies_come_out_of_order(rokd):
    """A join sent first is answered after a ping sent later, on the same
    connection: replies are routed by id, not by order."""
    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            t = await c.spawn(kind="sleep", args=["1h"])
            join = asyncio.ensure_future(t.join())
            # Sent after the join (requests leave in order) ...
            for _ in range(3):
                await c.ping()
            # ... and answered while the join is still waiting.
            assert not join.done()
            rs = await asyncio.gather(
                c.run(kind="sleep", args=["300ms"]),
                c.run(kind="sleep", args=["1ms"]))
            assert [r.args for r in rs] == [(b"300ms",), (b"1ms",)]
            await t.cancel()
            assert (await join).state == "cancelled"

    run(main())


def test_cancelling_the_wait_leaves_the_task_running(rokd):
    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            t = await c.spawn(kind="sleep", args=["1h"])
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(t.join(), 0.05)
            waiter = asyncio.ensure_future(t.join())
            await asyncio.sleep(0)           # let it send its request
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            # The remote task was not cancelled, the connection goes on.
            assert (await t.status()).state in ("queued", "running")
            await c.ping()
            await t.cancel()                 # the abandoned joins' replies
            assert (await t.join()).state == "cancelled"   # are dropped
            await c.ping()

    run(main())


def test_logs_follow_while_the_task_writes(rokd, tmp_path):
    go = tmp_path / "go"

    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            t = await c.spawn(["sh", "-c", f"echo first; "
                               f"while [ ! -e {go} ]; do sleep 0.01; done; "
                               f"echo second"])
            got = []
            stream = t.logs(follow=True)
            async for chunk in stream:
                got.append(chunk)
                if chunk == (rok.STDOUT, b"first\n"):
                    assert (await t.status()).state == "running"
                    go.touch()
            assert b"".join(d for _, d in got) == b"first\nsecond\n"
            assert stream.result is not None and stream.result.ok

            # A later run's output is marked where it begins: run 1
            # writes, then fails once `go2` exists; run 2 writes.
            go2, again = tmp_path / "go2", tmp_path / "again"
            r = await c.spawn(["sh", "-c", f"if [ -e {again} ]; then "
                               f"echo second; exit 0; fi; touch {again}; "
                               f"echo first; while [ ! -e {go2} ]; do "
                               f"sleep 0.01; done; exit 1"],
                              retry_failed=1, backoff=0.01)
            runs = []
            stream = r.logs(follow=True)
            async for chunk in stream:
                runs.append((chunk, stream.run))
                if chunk == (rok.STDOUT, b"first\n"):
                    go2.touch()
            assert runs == [((rok.STDOUT, b"first\n"), 0),
                            ((rok.STDOUT, b"second\n"), 2)]

            # Leaving a follow stream early does not disturb the rest.
            s = await c.spawn(["sh", "-c", "echo a; sleep 3600"])
            async with s.logs(follow=True) as early:
                async for chunk in early:
                    assert chunk == (rok.STDOUT, b"a\n")
                    break
            await c.ping()
            await s.cancel()
            assert (await s.join()).state == "cancelled"

    run(main())


def test_requests_over_the_daemons_limit_wait_in_the_client(make_rokd):
    d = make_rokd({"max_in_flight": "4"})

    async def main():
        async with rok.aio.connect(d.socket) as c:
            assert c.server.max_in_flight == 4
            rs = await asyncio.gather(*(c.run(kind="sleep", args=["5ms"])
                                        for _ in range(50)))
            assert all(r.ok for r in rs)

    run(main())


def test_a_burst_past_the_write_buffer_waits_for_it(rokd, monkeypatch):
    """More requests than the client buffers: callers wait for the socket
    to drain (pause_writing / resume_writing), and every reply comes."""
    monkeypatch.setattr(rok.aio, "_WRITE_HIGH", 64 * 1024)
    pauses = []
    pause = rok.aio._Conn.pause_writing

    def counting(self):
        pauses.append(1)
        pause(self)

    monkeypatch.setattr(rok.aio._Conn, "pause_writing", counting)

    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            args = [b"%d" % i + b"." * 16000 for i in range(400)]
            rs = await asyncio.gather(*(c.run(kind="echo", args=[a])
                                        for a in args))
            assert [r.value for r in rs] == args
            assert pauses, "6 MB never filled a 64 KiB buffer"
            await c.ping()

    run(main())


def test_close_does_not_wait_for_a_daemon_that_stopped_reading(
        fake_daemon):
    stuck = threading.Event()

    def handler(req):
        stuck.wait(WAIT)        # stops reading the socket
        return None

    f = fake_daemon(handler)

    async def main():
        c = await rok.aio.connect(f.socket)
        pings = [asyncio.ensure_future(c.ping(b"." * 65536))
                 for _ in range(200)]
        # Wait until the client holds what the socket would not take.
        while c._conn._drained is None:
            await asyncio.sleep(0.001)
        await c.close()
        for p in pings:
            with pytest.raises(rok.ConnectionError):
                await p

    try:
        run(main())
    finally:
        stuck.set()


def test_daemon_dies_mid_call(make_rokd):
    d = make_rokd()

    async def main():
        c = await rok.aio.connect(d.socket)
        t = await c.spawn(kind="sleep", args=["1h"])
        joins = [asyncio.ensure_future(t.join()) for _ in range(3)]
        stream = asyncio.ensure_future(
            c.logs(t, follow=True).__anext__())
        await c.ping()                 # the joins and the stream are sent
        d.kill()
        for j in joins + [stream]:
            with pytest.raises(rok.ConnectionError):
                await j
        with pytest.raises(rok.ConnectionError):
            await c.ping()             # and every later call, at once
        await c.close()

    run(main())


def test_connect_to_nothing(tmp_path):
    with pytest.raises(rok.ConnectionError):
        run(rok.aio.connect(str(tmp_path / "none.sock")))


def test_watch_async(rokd):
    async def main():
        async with rok.aio.connect(rokd.socket) as c:
            a = await c.spawn(kind="noop")
            b = await c.spawn(kind="sleep", args=["100ms"])
            ends = []
            async for ev in c.watch([a, b]):
                if ev.kind == "state" and ev.state.finished:
                    ends.append(ev.id)
                    assert ev.result is not None and ev.result.ok
            assert sorted(ends) == [a.id, b.id]
            # All of ours: the snapshot, then a change pushed to us.
            w = c.watch()
            ev = await w.__anext__()
            while ev.kind != "snapshot_done":
                ev = await w.__anext__()
            t = await c.spawn(kind="noop")
            while not (ev.id == t.id and ev.kind == "state" and
                       ev.state.finished):
                ev = await w.__anext__()
            await w.aclose()
            assert await c.ping() >= 0

    asyncio.run(main())


def test_a_watch_that_ends_gives_its_slot_back(make_rokd):
    # A watch of ids ends once they have; the daemon no longer counts it
    # against max_in_flight, and neither may the client, or three such
    # watches would leave no slot for the ping.
    d = make_rokd({"max_in_flight": "2"})

    async def main():
        async with rok.aio.connect(d.socket) as c:
            t = await c.spawn(kind="noop")
            await t.join()
            for _ in range(3):
                evs = [ev async for ev in c.watch([t])]
                assert any(ev.kind == "state" and ev.id == t.id for ev in evs)
            await asyncio.wait_for(c.ping(), 10)

    run(main())
