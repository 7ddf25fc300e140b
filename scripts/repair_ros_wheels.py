# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Rewrite build-machine paths baked into the ROS 2 wheels' CMake export files.

The PyPI wheels of ROS 2 were built in a manylinux container; their exported CMake targets
name that container's Python include directory and NumPy include directory, and CMake
refuses imported targets with non-existent include paths. This rewrites both strings in
``$VIRTUAL_ENV/share/*/cmake/*.cmake`` to this interpreter's paths.

Fast DDS's export (reached by anything that links rcl, such as coda_core_cpp's control loop) also names the
container's TinyXML2 library (``/usr/lib64/libtinyxml2.so``) and OpenSSL as link dependencies, and its config
requires OpenSSL's development files. The wheel's ``libfastdds.so`` carries its own copies of both (auditwheel
bundles them beside it), so a consumer links neither: the two link entries are dropped and OpenSSL becomes
optional. Idempotent.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import numpy

BUILD_MACHINE_PATHS = {
    "/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include": numpy.get_include(),
    "/opt/python/cp311-cp311/include/python3.11": sysconfig.get_paths()["include"],
}


FILE_EDITS: dict[str, dict[str, str]] = {
    "fastdds/cmake/fastdds-shared-targets.cmake": {
        "/usr/lib64/libtinyxml2.so;": "",
        "\\$<\\$<BOOL:1>:OpenSSL::SSL\\$<SEMICOLON>OpenSSL::Crypto\\$<\\$<BOOL:>:\\$<SEMICOLON>crypt32.lib>>;": "",
    },
    "fastdds/cmake/fastdds-config.cmake": {"find_package(OpenSSL REQUIRED)": "find_package(OpenSSL QUIET)"},
}
"""Per file below ``share/``: strings replaced (the build machine's libraries that the wheel bundles itself)."""


def repair(prefix: Path) -> int:
    """Rewrite the known bad paths below ``prefix/share``; return the number of files changed."""
    changed = 0
    for cmake_file in sorted(prefix.glob("share/*/cmake/*.cmake")):
        text = cmake_file.read_text(encoding="utf-8", errors="surrogateescape")
        new = text
        for bad, good in BUILD_MACHINE_PATHS.items():
            new = new.replace(bad, good)
        for bad, good in FILE_EDITS.get(cmake_file.relative_to(prefix / "share").as_posix(), {}).items():
            new = new.replace(bad, good)
        if new != text:
            cmake_file.write_text(new, encoding="utf-8", errors="surrogateescape")
            changed += 1
    return changed


def main() -> int:
    """Repair the prefix given as the only argument (default: this interpreter's prefix)."""
    prefix = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(sys.prefix)
    count = repair(prefix)
    print(f"repair_ros_wheels: {count} CMake file(s) rewritten under {prefix}/share")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
