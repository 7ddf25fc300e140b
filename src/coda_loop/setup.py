# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Build script of the coda_loop ament_python package."""

from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "coda_loop"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/config", glob("config/*.yaml")),
        # The workspace's launch files live once, in the top-level launch/ folder; installed here (symlinked by
        # --symlink-install), `ros2 launch coda_loop <file>` and FindPackageShare("coda_loop") find every one.
        ("share/" + PACKAGE + "/launch", sorted(glob("../../launch/*.launch.py"))),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="CoDA for ROS 2 maintainers",
    maintainer_email="coda-ros2@example.org",
    description=Path("package.xml").read_text().split("<description>")[1].split("</description>")[0],
    license="Apache-2.0",
    extras_require={"test": ["pytest"]},
    entry_points={
        # Console scripts land in lib/coda_loop/ (setup.cfg), where `ros2 run` looks.
        "console_scripts": [
            "coda = coda_loop.cli:main",
            "coda_loop = coda_loop.ros.loop_node:main",
            "memory = coda_loop.ros.memory_node:main",
        ],
    },
)
