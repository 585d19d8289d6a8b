"""The generated module, framing and conversions, without a daemon."""

import datetime
import os
import shutil
import struct
import subprocess

import pytest

import rok
from rok import _protocol as P
from rok import rok_pb2 as pb

from conftest import TOP

PROTO = os.path.join(TOP, "proto", "rok.proto")


def protoc_output(tmp_path, ext="py") -> bytes:
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    assert protoc, "protoc is needed (Debian: protobuf-compiler)"
    subprocess.run([protoc, f"--proto_path={os.path.dirname(PROTO)}",
                    f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
                    PROTO], check=True)
    with open(tmp_path / f"rok_pb2.{ext}", "rb") as f:
        return f.read()


@pytest.mark.parametrize("ext", ["py", "pyi"])
def test_generated_module_is_protocs_output(tmp_path, ext):
    """The module in use (and its stub) is exactly what protoc makes of the
    tree's rok.proto: a stale build, or an edited copy, fails here."""
    with open(os.path.splitext(pb.__file__)[0] + "." + ext, "rb") as f:
        assert f.read() == protoc_output(tmp_path, ext)


@pytest.mark.parametrize("ext", ["py", "pyi"])
def test_checked_in_copy_if_any_matches(tmp_path, ext):
    copy = os.path.join(TOP, "bindings", "python", "rok", f"rok_pb2.{ext}")
    if not os.path.exists(copy):
        return  # none checked in (the intended state): nothing can differ
    with open(copy, "rb") as f:
        assert f.read() == protoc_output(tmp_path, ext)


def frames(*resps):
    out = b""
    for r in resps:
        body = r.SerializeToString()
        out += struct.pack(">I", len(body)) + body
    return out


def test_decoder_any_split():
    resps = [pb.Response(id=i) for i in range(1, 4)]
    resps[1].ping.payload = b"\xff" * 300
    data = frames(*resps)
    for cut in range(len(data) + 1):
        d = P.Decoder()
        got = d.feed(data[:cut]) + d.feed(data[cut:])
        assert [r.id for r in got] == [1, 2, 3]
        assert got[1].ping.payload == b"\xff" * 300


def test_decoder_refuses_oversized_and_garbage():
    with pytest.raises(rok.ConnectionError):
        P.Decoder().feed(struct.pack(">I", P.MAX_REPLY + 1))
    with pytest.raises(rok.ConnectionError):
        P.Decoder().feed(struct.pack(">I", 3) + b"\xff\xff\xff")


def test_decoder_byte_by_byte():
    resps = [pb.Response(id=i, ping={"payload": b"p" * i})
             for i in (1, 200, 3)]
    data = frames(*resps)
    d = P.Decoder()
    got = []
    for i in range(len(data)):
        got += d.feed(data[i:i + 1])
    assert got == resps


def test_frame_refuses_frames_over_the_daemons_cap():
    req = P.ping(b"x" * 100)
    assert len(P.frame(req, 1, 1 << 20)) > 100
    with pytest.raises(rok.InvalidArgument):
        P.frame(req, 1, 50)
    spawn = P.spawn(P.spec_fields([b"x" * 100]))
    with pytest.raises(rok.InvalidArgument):
        P.frame(spawn, 1, 50)


IDS = [1, 127, 128, 300, 16383, 16384, 2**21 - 1, 2**21, 2**35, 2**64 - 1]


def test_frame_is_the_generated_classes_encoding():
    """A request built without its id, framed under one: the bytes the
    generated class makes with the id set."""
    for rid in IDS:
        for req in (P.ping(b"\xff" * 200), P.stats(), P.join([1, 2**40], 5)):
            full = pb.Request()
            full.CopyFrom(req)
            full.id = rid
            body = full.SerializeToString()
            assert P.frame(req, rid, 1 << 20) == \
                struct.pack(">I", len(body)) + body


def spawn_cases():
    """spec_fields arguments with every TaskSpec field 1-9 set (and not),
    with lengths and numbers on both sides of each varint size."""
    env = {b"K": b"\x80", "LONG": "v" * 300, b"E": b""}
    return [
        dict(kind="noop"),
        dict(kind="echo", args=["x"]),
        dict(kind="sleep", args=["1h"], timeout=0.001, retry=1),
        dict(args=["true"]),                              # inherited env, cwd
        dict(args=[b"\xff", b"", "a\udcfe", b"y" * 127, b"z" * 128,
                   b"w" * 20000], env=env, cwd="/x", stdin=b"in\xff",
             timeout=2**40 / 1000, kill_grace=0.5, retry=2**32 - 1),
        dict(args=["true"], clean_env=True, cwd="", stdin=b""),
        dict(args=["true"], env={}, timeout=0, kill_grace=0, retry=0),
        dict(args=["true"], env=env, clean_env=True, kill_grace=3600),
    ]


def test_spawn_encoding_is_the_generated_classes_encoding():
    """P.spawn encodes TaskSpec and SpawnRequest by hand: byte for byte
    what the generated classes make of the same fields (every field 1-9
    of TaskSpec is set by some case, so a wrong number or wire type in
    the hand encoder fails here)."""
    seen = set()
    for case in spawn_cases():
        fields = P.spec_fields(**case)
        seen.update(k for k, v in fields.items() if v)
        for wait, wait_timeout in ((False, None), (True, None), (True, 0),
                                   (True, 0.25), (False, 2**50)):
            got = P.spawn(fields, wait, wait_timeout)
            want = pb.Request(spawn={
                "spec": fields, "wait": wait,
                "wait_timeout_ms": P.to_ms(wait_timeout, "t")})
            assert got == want.SerializeToString()
            for rid in IDS:
                want.id = rid
                body = want.SerializeToString()
                assert P.frame(got, rid, 1 << 30) == \
                    struct.pack(">I", len(body)) + body
    assert seen == set(P._SPEC_KEYS)
    assert seen == {f.name for f in pb.TaskSpec.DESCRIPTOR.fields
                    if f.number <= 9}


def sample(field):
    """A non-default value for a TaskSpec field."""
    F = field
    if F.type == F.TYPE_BYTES or F.type == F.TYPE_STRING:
        v = b"v" * 130 if F.type == F.TYPE_BYTES else "v" * 130
    elif F.type == F.TYPE_ENUM:
        v = F.enum_type.values[-1].number
    elif F.type == F.TYPE_BOOL:
        v = True
    elif F.type == F.TYPE_MESSAGE:
        return {}
    else:
        v = 300
    return [v, v] if F.label == F.LABEL_REPEATED else v


def test_spawn_encodes_fields_it_does_not_know():
    """TaskSpec fields past the hand-encoded ones (added to the protocol
    later: scheduling, resources) go through the generated class."""
    later = [f for f in pb.TaskSpec.DESCRIPTOR.fields
             if f.name not in P._SPEC_KEYS]
    assert all(f.number > 9 for f in later)
    fields = P.spec_fields(["true"], env={b"A": b"b"}, cwd="/")
    fields["retry"] = 3
    for f in later:
        fields[f.name] = sample(f)
    want = pb.Request(spawn={"spec": fields, "wait": True})
    assert P.spawn(fields, True) == want.SerializeToString()


def test_durations():
    assert P.to_ms(None, "t") == 0
    assert P.to_ms(1.5, "t") == 1500
    assert P.to_ms(0.0001, "t") == 1      # positive is never "none"
    assert P.to_ms(datetime.timedelta(minutes=1), "t") == 60000
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError):
            P.to_ms(bad, "t")
    with pytest.raises(ValueError):
        P.to_ms(1e30, "t")
    with pytest.raises(TypeError):
        P.to_ms("5s", "t")


def spec_msg(*args, **kw):
    return pb.TaskSpec(**P.task_spec(P.make_spec(*args, **kw)))


def test_spec_defaults_and_bytes():
    spec = spec_msg([b"\xff", "a\udcfe"], cwd="/x", env={b"K": b"\x80"})
    assert list(spec.args) == [b"\xff", b"a\xfe"]   # surrogateescape
    assert list(spec.env) == [b"K=\x80"] and spec.cwd == b"/x"
    inherited = spec_msg(["true"])
    assert len(inherited.env) == len(os.environ)
    assert inherited.cwd == os.fsencode(os.getcwd())
    clean = spec_msg(["true"], clean_env=True)
    assert clean.clean_env and not clean.env
    with pytest.raises(TypeError):
        P.make_spec("ls -l")
    with pytest.raises(ValueError):
        spec_msg([])
    with pytest.raises(ValueError):
        spec_msg(kind="noop", cwd="/")


def test_result_conversion():
    info = pb.TaskInfo(id=7, state=pb.TASK_FAILED, kind=b"exec",
                       has_exit_code=True, exit_code=3, reason=b"r\xff",
                       started_us=2_000_000, finished_us=3_500_000)
    r = P.result(info)
    assert r.state == "failed" and r.state is rok.State.FAILED
    assert r.exit_code == 3 and r.signal is None and not r.ok
    assert r.duration == 1.5 and r.spawned_at is None
    assert r.reason == "r\ufffd"
    with pytest.raises(rok.TaskFailed) as e:
        r.check()
    assert e.value.result is r
    err = pb.TaskInfo(id=9)
    err.error.code = pb.NOT_FOUND
    with pytest.raises(rok.NotFound):
        P.result(err)


def test_socket_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("ROK_SOCKET", "/a/b.sock")
    assert rok.socket_path() == "/a/b.sock"
    assert rok.socket_path("/c.sock") == "/c.sock"
    monkeypatch.delenv("ROK_SOCKET")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert rok.socket_path() == "/run/rok/rokd.sock"
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
    assert rok.socket_path() == "/run/user/4242/rok/rokd.sock"
    # Without XDG_RUNTIME_DIR (or a relative one): /tmp/rok-UID, only if it
    # is the user's own private directory.
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative")
    monkeypatch.setattr(os, "geteuid", lambda: 987654321)
    with pytest.raises(rok.ConnectionError):
        rok.socket_path()        # /tmp/rok-987654321 does not exist
    # The accepting case needs a directory owned by the (pretended) euid:
    # ours, or, as root (whose socket is /run/rok), one chowned to a uid.
    uid = os.getuid() if os.getuid() != 0 else 4243
    d = f"/tmp/rok-{uid}"
    if os.path.exists(d):
        return  # a real one: leave it alone
    os.mkdir(d, 0o755)
    try:
        if os.getuid() == 0:
            os.chown(d, uid, -1)
        monkeypatch.setattr(os, "geteuid", lambda: uid)
        with pytest.raises(rok.ConnectionError):
            rok.socket_path()            # open to others: refused
        os.chmod(d, 0o700)
        assert rok.socket_path() == f"{d}/rokd.sock"
        if os.getuid() == 0:
            os.chown(d, uid + 1, -1)
            with pytest.raises(rok.ConnectionError):
                rok.socket_path()        # someone else's: refused
    finally:
        os.rmdir(d)


def test_error_classes():
    codes = {rok.NotFound: pb.NOT_FOUND,
             rok.PermissionDenied: pb.PERMISSION_DENIED,
             rok.InvalidArgument: pb.INVALID_ARGUMENT,
             rok.ResourceExhausted: pb.RESOURCE_EXHAUSTED,
             rok.TimedOut: pb.TIMED_OUT, rok.Cancelled: pb.CANCELLED,
             rok.Unavailable: pb.UNAVAILABLE, rok.Internal: pb.INTERNAL}
    assert len(codes) == len(pb.ErrorCode.values()) - 1   # all but OK
    for cls, code in codes.items():
        assert issubclass(cls, rok.Error) and cls.code == code
    assert issubclass(rok.ConnectionError, ConnectionError)
    assert issubclass(rok.TimedOut, TimeoutError)
