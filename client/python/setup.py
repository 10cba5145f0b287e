"""The package's one build step beyond setuptools' defaults (the metadata is
in pyproject.toml): build_py also writes the gRPC stubs, conveyor._proto,
generated from proto/ (gen_stubs.py), into the wheel or the install. They are
not in the source tree; a source checkout finds them in the CMake build tree
(conveyor/_stub_path.py).

Build requirements: none extra when protoc and grpc_python_plugin are on
PATH (Debian: protobuf-compiler, protobuf-compiler-grpc), which is also what
`pip install --no-build-isolation --no-index` needs; without them an isolated
build asks for grpcio-tools from the index.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        if not self.dry_run:
            gen_stubs.generate(self.build_lib)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + gen_stubs.outputs(self.build_lib)


def _protoc_found():
    return gen_stubs.find_compiler() is not None


setup(cmdclass={"build_py": BuildPyWithStubs},
      # setuptools' build backend reports these as the build's requirements.
      setup_requires=[] if _protoc_found() else ["grpcio-tools"])
