# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Build script of the coda_policy ament_python package."""

from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "coda_policy"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    package_data={PACKAGE: ["data/*", "data/**/*", "suites/*.yaml", "suites/validation/*.yaml", "suites/README.md"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="CoDA for ROS 2 maintainers",
    maintainer_email="coda-ros2@example.org",
    description=Path("package.xml").read_text().split("<description>")[1].split("</description>")[0],
    license="Apache-2.0",
    extras_require={"test": ["pytest"]},
    entry_points={
        # Console scripts land in lib/coda_policy/ (setup.cfg), where `ros2 run` looks.
        "console_scripts": ["policy = coda_policy.ros.policy_node:main"],
        # How the engine's workers and bridges run a trained version (coda_engine.policies.LOADER_GROUP).
        "coda_engine.policy_loaders": ["checkpoint = coda_policy.serving:load_action_fn"],
    },
)
