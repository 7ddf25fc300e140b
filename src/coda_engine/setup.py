# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Build script of the coda_engine ament_python package."""

from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "coda_engine"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    package_data={PACKAGE: ["data/*", "data/**/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/config", glob("config/*.yaml")),
        ("share/" + PACKAGE + "/config/robots", glob("config/robots/*.yaml")),
        ("share/" + PACKAGE + "/config/dds", glob("config/dds/*.xml")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="CoDA for ROS 2 maintainers",
    maintainer_email="coda-ros2@example.org",
    description=Path("package.xml").read_text().split("<description>")[1].split("</description>")[0],
    license="Apache-2.0",
    extras_require={"test": ["pytest"]},
    entry_points={
        # Console scripts land in lib/coda_engine/ (setup.cfg), where `ros2 run` looks.
        "console_scripts": [
            "dds_check = coda_engine.ros.dds_check:main",
            "scene_generator = coda_engine.ros.scene_generator_node:main",
            "sim_bridge = coda_engine.ros.sim_bridge_node:main",
            "fake_ros2_control_arm = coda_engine.ros.fake_arm_node:main",
            "arm_bridge = coda_engine.ros.arm_bridge_node:main",
        ],
    },
)
