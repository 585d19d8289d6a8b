"""The examples run against a real rokd and do what they say."""

import os
import subprocess
import sys

from conftest import TOP, WAIT

EXAMPLES = os.path.join(TOP, "bindings", "python", "examples")


def run(rokd, name, *args):
    env = dict(os.environ, ROK_SOCKET=rokd.socket)
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, name),
                           *args], env=env, capture_output=True,
                          timeout=WAIT)


def test_batch(rokd):
    p = run(rokd, "batch.py", "-j", "2", "true", "exit 4", "echo x")
    assert p.returncode == 1, p.stderr          # one command failed
    lines = p.stdout.decode().splitlines()
    assert len(lines) == 3
    assert "succeeded" in lines[0] and "exit code 4" in lines[1]


def test_race(rokd):
    p = run(rokd, "race.py", "sleep 3600", "true")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "winner: 'true'" in out and "cancelled" in out


def test_follow(rokd):
    p = run(rokd, "follow.py", "sh", "-c", "echo 1; echo 2 >&2; exit 3")
    assert p.returncode == 1
    assert p.stdout == b"1\n" and b"2\n" in p.stderr
    assert b"exit code 3" in p.stderr
