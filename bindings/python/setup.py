"""Build of the rok binding: setuptools, plus one step -- rok/rok_pb2.py
(and its type stub rok_pb2.pyi) is generated from the tree's
proto/rok.proto by protoc whenever the package is built (it is never
committed; see tests/test_proto.py).

    PROTOC     the protoc to run (default: protoc on PATH)
    ROK_PROTO  the rok.proto to compile (default: ../../proto/rok.proto)
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def proto_path() -> str:
    path = os.environ.get("ROK_PROTO") or os.path.join(
        HERE, "..", "..", "proto", "rok.proto")
    if not os.path.isfile(path):
        raise SystemExit(f"rok: {path} not found (set ROK_PROTO to rok.proto)")
    return os.path.abspath(path)


def generate(out_dir: str) -> None:
    """Runs protoc on rok.proto into out_dir/rok_pb2.py and .pyi."""
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    if not protoc:
        raise SystemExit("rok: protoc not found (Debian: apt-get install "
                         "protobuf-compiler), or set PROTOC")
    proto = proto_path()
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([protoc, f"--proto_path={os.path.dirname(proto)}",
                    f"--python_out={out_dir}", f"--pyi_out={out_dir}", proto],
                   check=True)


class BuildPy(build_py):
    """build_py that also generates rok/rok_pb2.py in the build tree."""

    def run(self) -> None:
        super().run()
        generate(os.path.join(self.build_lib, "rok"))

    def get_outputs(self, include_bytecode: bool = True):  # type: ignore
        outputs = super().get_outputs(include_bytecode)
        return outputs + [os.path.join(self.build_lib, "rok", f"rok_pb2.{x}")
                          for x in ("py", "pyi")]


setup(cmdclass={"build_py": BuildPy})
