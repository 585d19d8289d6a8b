"""rok.Client against real rokd processes: every call, errors, bytes,
logs, and a daemon that dies mid-call."""

import datetime
import os
import shutil
import subprocess
import threading

import pytest

import rok
from rok import rok_pb2 as pb

from conftest import WAIT, FakeDaemon, wait_until

SH = "/bin/sh"


def test_connect_and_server_info(rokd):
    with rok.connect(rokd.socket) as c:
        assert c.server.protocol_version == rok.PROTOCOL_VERSION
        assert c.server.software_version.startswith("rokd")
        assert c.server.uid == os.geteuid()
        assert c.server.max_frame > 0 and c.server.max_in_flight > 0
        assert c.socket == rokd.socket
        assert c.ping(b"\x00\xff") >= 0
    with pytest.raises(rok.ConnectionError):
        c.ping()                                  # closed


def test_connect_uses_rok_socket(rokd, monkeypatch):
    monkeypatch.setenv("ROK_SOCKET", rokd.socket)
    with rok.connect() as c:
        c.ping()


def test_connect_to_nothing_raises(tmp_path):
    with pytest.raises(rok.ConnectionError):
        rok.connect(str(tmp_path / "none.sock"))


def test_spawn_exec_join_check(client):
    t = client.spawn([SH, "-c", "exit 3"])
    assert isinstance(t.id, int) and t.id > 0
    r = t.join()
    assert r.id == t.id and r.state == "failed" and not r.ok
    assert r.exit_code == 3 and r.signal is None and r.kind == "exec"
    assert r.finished and r.started_at <= r.finished_at
    with pytest.raises(rok.TaskFailed) as e:
        r.check()
    assert e.value.result is r
    ok = client.spawn(["true"]).join()
    assert ok.ok and ok.check() is ok and ok.exit_code == 0


def test_signal_reported(client):
    r = client.spawn([SH, "-c", "kill -9 $$"]).join()
    assert r.state == "failed" and r.signal == 9 and r.exit_code is None


def test_builtin_kinds_and_run(client):
    assert client.spawn(kind="noop").join().ok
    assert client.run(kind="echo", args=["hi"]).value == b"hi"
    r = client.run(kind="sleep", args=["1h"], timeout=0.05)
    assert r.state == "timed_out"
    with pytest.raises(rok.TimedOut):
        client.run(kind="sleep", args=["1h"], wait_timeout=0.05)


def test_exec_env_cwd_stdin(client, tmp_path, monkeypatch):
    script = 'printf "%s|%s|" "$FOO" "$(pwd)"; cat'
    t = client.spawn([SH, "-c", script], env={"FOO": "bar"},
                     cwd=str(tmp_path), stdin=b"in\xff")
    assert t.join().ok
    out = b"".join(d for s, d in t.logs() if s == rok.STDOUT)
    assert out == b"bar|" + os.fsencode(str(tmp_path)) + b"|in\xff"
    # By default, this process's environment and directory, as rokctl.
    monkeypatch.setenv("ROK_PYTEST_MARK", "m1")
    monkeypatch.chdir(tmp_path)
    t = client.spawn([SH, "-c", 'printf "%s %s" "$ROK_PYTEST_MARK" "$(pwd)"'])
    t.join().check()
    assert b"".join(d for _, d in t.logs()) == \
        b"m1 " + os.fsencode(str(tmp_path))
    # clean_env: the daemon's minimal environment plus env.
    t = client.spawn([SH, "-c", 'printf "%s" "${ROK_PYTEST_MARK-unset}"'],
                     clean_env=True)
    t.join().check()
    assert b"".join(d for _, d in t.logs()) == b"unset"


def test_bytes_that_are_not_utf8_round_trip(client):
    raw = b"\xff\xfe\x80 \xc3("
    t = client.spawn(["printf", "%s", raw])
    r = t.join().check()
    assert r.args == (b"printf", b"%s", raw)
    assert b"".join(d for _, d in t.logs()) == raw
    assert client.run(kind="echo", args=[raw]).value == raw
    # str arguments with surrogate escapes are the same bytes (os.fsencode)
    assert client.run(kind="echo",
                      args=[os.fsdecode(raw)]).value == raw


def test_status_cancel_join_timeout(client):
    t = client.spawn(kind="sleep", args=["1h"])
    assert t.status().state in ("queued", "running")
    with pytest.raises(rok.TimedOut):
        t.join(timeout=0.05)
    assert t.status().state in ("queued", "running")    # still there
    t.cancel()
    r = t.join()
    assert r.state == "cancelled" and not r.ok
    t.cancel()                           # a finished task: not an error


def test_join_all_keeps_order(client):
    tasks = [client.spawn(kind="echo", args=[str(i)]) for i in range(5)]
    results = client.join_all(reversed(tasks))
    assert [r.value for r in results] == [b"4", b"3", b"2", b"1", b"0"]
    assert [r.id for r in client.join_all(t.id for t in tasks)] == \
        [t.id for t in tasks]


def test_race(client):
    slow = client.spawn(kind="sleep", args=["1h"])
    fast = client.spawn(kind="sleep", args=["10ms"])
    i, r = client.race([slow, fast])
    assert i == 1 and r.id == fast.id and r.ok
    assert slow.status().state in ("queued", "running")   # not cancelled
    done = client.spawn(kind="noop")
    i, r = client.race([slow, done], cancel_rest=True)
    assert i == 1 and r.id == done.id
    assert slow.join().state == "cancelled"


def test_select(client):
    specs = [rok.Spec(kind="sleep", args=["3599s"]),
             {"kind": "echo", "args": ["won"]}]
    i, r = client.select(specs)
    assert i == 1 and r.value == b"won"
    loser, = [t for t in client.list() if t.args == (b"3599s",)]
    assert client.task(loser.id).join().state == "cancelled"
    with pytest.raises(rok.TimedOut):
        client.select([rok.Spec(kind="sleep", args=["1h"])], timeout=0.05)
    i, r = client.select([["false"], ["true"]])      # argvs: exec tasks
    assert r.exit_code in (0, 1)


def test_list_pages_and_filters(rokd):
    with rokd.connect() as c:
        ids = [c.spawn(kind="noop").id for _ in range(25)]
        c.join_all(ids)
        listed = [r.id for r in c.list(page_size=10)]
        assert listed == sorted(listed) and set(ids) <= set(listed)
        after = [r.id for r in c.list(after=ids[9], page_size=7)]
        assert after[:15] == ids[10:]
        assert all(r.state == "succeeded" for r in c.list(state="succeeded"))
        sleeper = c.spawn(kind="sleep", args=["1h"])
        wait_until(lambda: sleeper.status().state == "running", "running")
        assert sleeper.id in [r.id for r in c.list(state=rok.State.RUNNING)]
        sleeper.cancel()
        with pytest.raises(ValueError):
            list(c.list(state="sleepy"))


def test_stats(client):
    client.spawn(kind="noop").join()
    s = client.stats()
    assert s["workers"] == 2 and s["succeeded"] >= 1
    assert s["connections"] >= 1 and "uptime_ms" in s
    assert s["tasks_total"][3] >= 1              # TASK_SUCCEEDED
    h = s["run_time"]
    assert len(h["counts"]) == len(h["bounds_us"]) + 1
    assert sum(h["counts"]) >= 1 and isinstance(h["sum_us"], int)


def test_prune(client):
    client.spawn(kind="noop").join()
    assert client.prune(keep=0) >= 1


def test_logs_follow_while_the_task_writes(client, tmp_path):
    go = tmp_path / "go"
    t = client.spawn([SH, "-c", f'echo first; echo e >&2; '
                      f'while [ ! -e {go} ]; do sleep 0.01; done; '
                      f'echo second'])
    with t.logs(follow=True) as stream:
        got = [next(stream)]
        # The first line came while the task is still waiting for `go`.
        assert t.status().state == "running"
        assert got[0] == (rok.STDOUT, b"first\n")
        go.touch()
        got += list(stream)
    assert (rok.STDERR, b"e\n") in got
    assert b"".join(d for s, d in got if s == rok.STDOUT) == \
        b"first\nsecond\n"
    assert stream.result is not None and stream.result.ok


def test_logs_follow_marks_a_later_run(client, tmp_path):
    # Run 1 writes, then fails once `go` exists; run 2 writes and succeeds.
    go, again = tmp_path / "go", tmp_path / "again"
    t = client.spawn([SH, "-c", f'if [ -e {again} ]; then echo second; '
                      f'exit 0; fi; touch {again}; echo first; '
                      f'while [ ! -e {go} ]; do sleep 0.01; done; exit 1'],
                     retry_failed=1, backoff=0.01)
    with t.logs(follow=True) as stream:
        assert next(stream) == (rok.STDOUT, b"first\n")
        assert stream.run == 0
        go.touch()
        assert next(stream) == (rok.STDOUT, b"second\n")
        assert stream.run == 2
        assert list(stream) == []
    assert stream.result is not None and stream.result.ok
    assert stream.result.run == 2
    # Read afterwards, only the last run's output is left: no later run.
    with t.logs() as plain:
        assert list(plain) == [(rok.STDOUT, b"second\n")]
        assert plain.run == 0


def test_logs_stream_abandoned_early(client):
    t = client.spawn([SH, "-c", "echo a; sleep 3600"])
    s = t.logs(follow=True)
    assert next(s) == (rok.STDOUT, b"a\n")
    s.close()
    assert client.ping() >= 0                # the connection goes on
    t.cancel()
    assert t.join().state == "cancelled"


def test_groups_and_priorities(make_rokd):
    d = make_rokd({"group.one.parallel": "1", "group.one.paused": "yes",
                   "group.hpc.backend": "slurm",
                   "group.hpc.partition": "batch", "aging": "0"})
    with rok.connect(d.socket) as c:
        gs = {g.name: g for g in c.groups()}
        assert set(gs) == {"default", "one", "hpc"}
        assert gs["one"] == rok.Group("one", 1, "strict", "local", True,
                                      (50, 30, 15, 5))
        assert (gs["hpc"].backend, gs["hpc"].partition) == ("slurm", "batch")
        low = c.spawn(["true"], group="one", priority="low")
        urgent = c.spawn(["true"], group="one", priority="urgent")
        s = low.status()
        assert (s.state, s.group, s.priority) == ("queued", "one", "low")
        assert s.waiting == "group one paused"
        assert [r.id for r in c.list(group="one")] == [low.id, urgent.id]
        st = c.stats()
        one = [g for g in st["groups"] if g["name"] == "one"][0]
        assert one["queued"] == {"urgent": 1, "high": 0, "normal": 0,
                                 "low": 1}
        assert one["paused"] and one["parallel"] == 1
        # a built-in kind takes no slot: it runs in a paused group
        assert c.run(kind="noop", args=[]).ok
        with pytest.raises(rok.InvalidArgument, match="unknown group"):
            c.spawn(["true"], group="nosuch")
        with pytest.raises(ValueError):
            c.spawn(["true"], priority="soon")
        urgent.cancel()
        low.cancel()
        assert urgent.join().state == "cancelled"
        r = c.spawn(["true"]).join()
        assert (r.group, r.priority, r.waiting) == ("default", "normal", "")


def test_dependencies(client, tmp_path):
    gate = tmp_path / "gate"
    a = client.spawn([SH, "-c", f"until [ -e '{gate}' ]; do sleep 0.01; "
                      "done"])
    b = client.spawn(["B"], kind="echo", after=[a])
    c = client.spawn(["C"], kind="echo", after=[b.id])
    any_ = client.spawn(kind="noop", after_any=[a, c])
    wait_until(lambda: a.status().state == "running", "a running")
    st = c.status()
    assert st.state == "queued" and st.waiting == f"after task {b.id}"
    gate.touch()
    r = c.join()
    assert r.ok and r.value == b"C" and r.run == 1 and r.waiting == ""
    assert any_.join().ok
    f = client.spawn([SH, "-c", "exit 3"])
    g = client.spawn(kind="noop", after=[f])
    h = client.spawn(kind="noop", after=[g])
    r = h.join()
    assert r.state == "cancelled" and r.reason == f"dependency {g.id} failed"
    assert g.status().reason == f"dependency {f.id} failed"
    with pytest.raises(rok.InvalidArgument, match="no such task"):
        client.spawn(kind="noop", after=[10**9])


def test_delayed_start_and_retries(client, tmp_path):
    t = client.spawn(["later"], kind="echo", delay=0.3)
    st = t.status()
    assert st.state == "queued" and st.waiting.startswith("not before ")
    assert st.not_before is not None
    r = t.join()
    assert r.ok and r.started_at >= st.not_before
    past = client.spawn(kind="noop",
                        at=datetime.datetime(2001, 1, 1,
                                             tzinfo=datetime.timezone.utc))
    assert past.join().ok
    with pytest.raises(ValueError):
        client.spawn(kind="noop", at=1.0, delay=1.0)
    count = tmp_path / "count"
    count.write_text("")
    script = (f"n=$(wc -l <'{count}'); echo x >>'{count}'; "
              "[ $n -ge 2 ]")
    r = client.spawn([SH, "-c", script], retry_failed=3,
                     backoff=0.05).join()
    assert r.ok and r.run == 3
    r = client.spawn([SH, "-c", "exit 5"], retry_failed=1).join()
    assert r.state == "failed" and r.exit_code == 5 and r.run == 2


def test_bad_arguments(client):
    with pytest.raises(TypeError):
        client.spawn("ls -l")
    with pytest.raises(ValueError):
        client.join_all([])
    with pytest.raises(ValueError):
        client.status([0])
    # Too large for the daemon's frame cap: refused here, the connection
    # (which the daemon would close) stays usable.
    with pytest.raises(rok.InvalidArgument):
        client.spawn(["true"], stdin=b"x" * (client.server.max_frame + 1))
    assert client.ping() >= 0


# ---- error codes from a real daemon -------------------------------------

def test_not_found(client):
    with pytest.raises(rok.NotFound):
        client.task(10**12).status()
    with pytest.raises(rok.NotFound):
        client.task(10**12).join()
    with pytest.raises(rok.NotFound):
        client.task(10**12).cancel()
    with pytest.raises(rok.NotFound):
        list(client.logs(10**12))


def test_invalid_argument(client):
    with pytest.raises(rok.InvalidArgument):
        client.spawn(kind="no-such-kind")
    with pytest.raises(rok.InvalidArgument):
        client.spawn(kind="sleep", args=["soon"])


def test_resource_exhausted(make_rokd):
    d = make_rokd({"max_in_flight": "1"})
    with d.connect() as c:
        t = c.spawn(["sleep", "3600"])
        # A follow stream counts as in flight until it ends, and a
        # connection's requests are handled in order: the join is over
        # the limit of 1.
        s = c.logs(t, follow=True)
        with pytest.raises(rok.ResourceExhausted):
            c.join_all([t])
        s.close()
        # The stream still holds the connection's one slot (it ends with
        # the task), and cancel counts as in flight too: cancel from
        # another connection.
        with d.connect() as c2:
            c2.cancel([t.id])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a daemon run "
                    "as root and a client of another uid")
def test_permission_denied(make_rokd):
    d = make_rokd({"socket_group": "nogroup"})
    with d.connect() as c:
        t = c.spawn(kind="sleep", args=["1h"])
    code = ("import rok, sys\n"
            f"c = rok.connect({d.socket!r})\n"
            "try:\n"
            f"    c.task({t.id}).status()\n"
            "except rok.PermissionDenied:\n"
            "    sys.exit(42)\n")
    # The client runs as nobody, who may not reach this checkout or venv
    # (under /root, say): give it a copy of the package in the daemon's
    # world-readable directory, and Debian's python3 with python3-protobuf.
    pkg = os.path.join(d.dir, "pkg")
    shutil.copytree(os.path.dirname(rok.__file__), os.path.join(pkg, "rok"))
    p = subprocess.run(["/usr/bin/python3", "-c", code], user="nobody",
                       group="nogroup", capture_output=True, cwd="/",
                       env={"PYTHONPATH": pkg}, timeout=WAIT)
    assert p.returncode == 42, p.stderr.decode()
    with d.connect() as c:
        c.cancel([t])


# ---- the daemon goes away -----------------------------------------------

def test_daemon_dies_mid_call(make_rokd):
    d = make_rokd()
    c = d.connect()
    t = c.spawn(kind="sleep", args=["1h"])
    outcome = []

    def joiner():
        try:
            t.join()
            outcome.append("returned")
        except rok.ConnectionError:
            outcome.append("ConnectionError")
        except BaseException as e:  # noqa: B902 (reported below)
            outcome.append(repr(e))

    threads = [threading.Thread(target=joiner) for _ in range(3)]
    for th in threads:
        th.start()
    d.kill()
    for th in threads:
        th.join(WAIT)
        assert not th.is_alive(), "a caller hangs on a dead daemon"
    assert outcome == ["ConnectionError"] * 3
    with pytest.raises(rok.ConnectionError):
        c.ping()                 # and every later call, at once
    c.close()


def test_threads_share_one_client(client):
    errors = []

    def work():
        try:
            for i in range(20):
                assert client.run(kind="echo", args=[str(i)]).value == \
                    str(i).encode()
        except BaseException as e:  # noqa: B902
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(WAIT)
    assert not errors and not any(th.is_alive() for th in threads)


# ---- every code, from a fake daemon --------------------------------------

@pytest.mark.parametrize("code,cls", [
    (pb.NOT_FOUND, rok.NotFound),
    (pb.PERMISSION_DENIED, rok.PermissionDenied),
    (pb.INVALID_ARGUMENT, rok.InvalidArgument),
    (pb.RESOURCE_EXHAUSTED, rok.ResourceExhausted),
    (pb.TIMED_OUT, rok.TimedOut),
    (pb.CANCELLED, rok.Cancelled),
    (pb.UNAVAILABLE, rok.Unavailable),
    (pb.INTERNAL, rok.Internal),
    (99, rok.Error),
])
def test_every_error_code_maps(fake_daemon, code, cls):
    def handler(req):
        resp = pb.Response(id=req.id)
        resp.error.code = code
        resp.error.message = b"said the fake"
        return FakeDaemon.frame(resp)

    f = fake_daemon(handler)
    with rok.connect(f.socket) as c:
        with pytest.raises(cls) as e:
            c.ping()
        assert type(e.value) is cls and e.value.code == code
        assert "said the fake" in str(e.value)
        with pytest.raises(cls):
            c.spawn(kind="noop")


def test_fake_daemon_hangs_up_or_misbehaves(fake_daemon):
    with rok.connect(fake_daemon(lambda req: None).socket) as c:
        with pytest.raises(rok.ConnectionError):
            c.stats()
    f = fake_daemon(lambda req: b"\x7f\xff\xff\xff")   # a 2 GiB frame
    with rok.connect(f.socket) as c:
        with pytest.raises(rok.ConnectionError):
            c.stats()
    f = fake_daemon(lambda req: FakeDaemon.frame(
        pb.Response(id=req.id, ping=pb.PingReply())))
    with rok.connect(f.socket) as c:
        with pytest.raises(rok.ConnectionError):
            c.stats()                     # a ping reply to a stats request
    f = fake_daemon(lambda req: None, hello_version=2)
    with pytest.raises(rok.ConnectionError, match="version 2"):
        rok.connect(f.socket)


def test_watch_ids_ends_when_all_have_ended(client):
    a = client.spawn(kind="noop")
    a.join()
    b = client.spawn(kind="sleep", args=["200ms"])
    events = list(client.watch([a, b.id]))
    kinds = [e.kind for e in events]
    assert kinds.count("snapshot_done") == 1
    ends = [e for e in events if e.kind == "state" and e.state.finished]
    assert sorted(e.id for e in ends) == [a.id, b.id]   # each once
    assert all(e.result is not None and e.result.ok for e in ends)
    first = next(e for e in events if e.id == a.id)
    assert first.snapshot and first.state == "succeeded"
    assert client.ping() >= 0                # the stream is over


def test_watch_all_then_changes(client):
    with client.watch(states=["succeeded"]) as w:
        ev = next(w)
        while ev.kind != "snapshot_done":
            assert ev.snapshot and ev.state == "succeeded"
            ev = next(w)
        t = client.spawn(kind="noop")
        ev = next(w)                          # pushed, never polled
        assert (ev.kind, ev.id, ev.state) == ("state", t.id, "succeeded")
        assert ev.result is not None and ev.result.id == t.id
        assert not ev.snapshot and ev.time is not None
    assert client.ping() >= 0                # closed early: goes on


def test_watch_bad_arguments(client):
    with pytest.raises(rok.NotFound):
        next(client.watch([999999]))
    with pytest.raises(ValueError):
        client.watch(states=["sleeping"])
    with pytest.raises(ValueError):
        client.watch([1], group="default")
    with client.watch(group="nosuchgroup") as w:
        assert next(w).kind == "snapshot_done"
    with pytest.raises(rok.InvalidArgument, match="bad group name"):
        next(client.watch(group="no such group"))
