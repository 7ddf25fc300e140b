# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""When an arm is exposed to other processes on the ROS domain, and what the start-up warning says."""

from __future__ import annotations

import pytest

from coda_engine.ros.security import cell_security

ENFORCED = {"ROS_SECURITY_ENABLE": "true", "ROS_SECURITY_STRATEGY": "Enforce", "ROS_SECURITY_KEYSTORE": "/keys"}


@pytest.mark.parametrize("env,exposed", [
    ({}, "WITHOUT ROS 2 security on domain 0"),
    ({"ROS_DOMAIN_ID": "42", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}, "on domain 42, reachable"),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "localhost"}, ""),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"}, ""),
    ({"ROS_LOCALHOST_ONLY": "1"}, ""),
    (ENFORCED, ""),
    ({**ENFORCED, "ROS_SECURITY_STRATEGY": "Permissive"}, "not enforced"),
    ({**ENFORCED, "ROS_SECURITY_STRATEGY": "Permissive", "ROS_LOCALHOST_ONLY": "1"}, "not enforced"),
    ({**ENFORCED, "ROS_SECURITY_KEYSTORE": ""}, "WITHOUT ROS 2 security"),
])
def test_exposure_is_named(env: dict[str, str], exposed: str) -> None:
    warning = cell_security(env).warning("arm_bridge panda_lab1")
    if exposed:
        assert warning.startswith("arm_bridge panda_lab1") and exposed in warning
    else:
        assert warning == ""
    if "WITHOUT" in warning:
        for remedy in ("reset_estop", "ROS_SECURITY_STRATEGY=Enforce", "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST",
                       "docs/security.md"):
            assert remedy in warning


def test_bad_domain_id_is_named() -> None:
    with pytest.raises(ValueError, match="ROS_DOMAIN_ID='lab' is not an integer"):
        cell_security({"ROS_DOMAIN_ID": "lab"})
