"""The generated gRPC stubs the package uses, imported in one place so that
their absence says what to do (conveyor/_stub_path.py says where they are
looked for):

  pb, pb_grpc          conveyor.v1 (proto/conveyor/v1/conveyor.proto)
  health_pb, health_grpc   grpc.health.v1 (proto/grpc/health/v1/health.proto)
"""

try:
    from ._proto.v1 import conveyor_pb2 as pb
    from ._proto.v1 import conveyor_pb2_grpc as pb_grpc
    from ._proto.grpc.health.v1 import health_pb2 as health_pb
    from ._proto.grpc.health.v1 import health_pb2_grpc as health_grpc
except ModuleNotFoundError as e:
    if not (e.name or "").startswith("conveyor._proto"):
        raise
    raise ImportError(
        "conveyor: the generated gRPC stubs (%s) are missing. In a source checkout build them "
        "(cmake --build build --target conveyor_python_stubs; they go to build/python, found "
        "through PYTHONPATH or $CONVEYOR_BUILD_DIR), or install the package "
        "(pip install ./client/python), which generates them" % e.name) from None

__all__ = ["pb", "pb_grpc", "health_pb", "health_grpc"]
