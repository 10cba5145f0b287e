"""Where the package's generated gRPC stubs (conveyor._proto) come from.

Installed (pip, a wheel, the container image) they sit inside the package.
In a source checkout they are not in the source tree: the CMake build writes
them under <build>/python/conveyor/_proto (target conveyor_python_stubs), and
the package's __path__ is extended to that folder, found as
  - a `conveyor` folder on sys.path (CTest puts <build>/python on PYTHONPATH),
  - else $CONVEYOR_BUILD_DIR/python/conveyor,
  - else build/python/conveyor of the checkout this package is in
    (client/python/conveyor -> ../../../build),
so the CLI and scripts run from a checkout without setting PYTHONPATH.
Pure path arithmetic at import time; no stub is imported here.
"""

import os
import pkgutil
from typing import List


def _has_stubs(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "_proto", "__init__.py"))


def extend(path: List[str], name: str) -> List[str]:
    """The package's __path__ (`path`, the package `name`) plus the folder
    holding the generated stubs, when the package itself has none."""
    path = pkgutil.extend_path(path, name)
    if any(_has_stubs(p) for p in path):
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    build_dir = os.environ.get("CONVEYOR_BUILD_DIR")
    if build_dir:
        candidates.append(os.path.join(build_dir, "python", "conveyor"))
    candidates.append(os.path.join(here, os.pardir, os.pardir, os.pardir, "build", "python",
                                   "conveyor"))
    for c in candidates:
        c = os.path.normpath(c)
        if _has_stubs(c):
            return list(path) + [c]
    return path
