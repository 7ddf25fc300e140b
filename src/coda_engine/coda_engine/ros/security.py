# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Who can reach a node: ROS 2 security (SROS2) settings and discovery range, read from the environment.

A node that moves a robot (``arm_bridge``) must not be driven by strangers on a shared ROS domain. With ROS 2
security enforced, only processes holding keys of the cell's keystore join, and the permissions decide which
enclave may call ``reset_estop`` / ``operator_verdict`` or send ``run_episode`` (``docs/security.md``). Without
it, any process that discovers the node can do all of that. :func:`cell_security` reads the
settings every rmw takes from the environment; :meth:`CellSecurity.warning` says, loudly, when an arm is exposed.
The PyPI wheels' DDS is built without the security plugins, so there the only protection is the discovery range
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) or a separate network. Pure module: no rclpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CellSecurity:
    """The security-relevant ROS settings of one process."""

    enabled: bool
    """``ROS_SECURITY_ENABLE=true``: the rmw loads keys and permissions from the keystore."""
    enforce: bool
    """``ROS_SECURITY_STRATEGY=Enforce``: a node without valid keys does not start (else it runs unsecured)."""
    keystore: str
    """``ROS_SECURITY_KEYSTORE``: the keystore folder ('' when unset)."""
    localhost_only: bool
    """Discovery limited to this machine (``ROS_AUTOMATIC_DISCOVERY_RANGE`` LOCALHOST or OFF)."""
    domain_id: int
    """``ROS_DOMAIN_ID`` (0 when unset)."""

    def warning(self, what: str) -> str:
        """Return why ``what`` (e.g. 'arm_bridge panda_lab1') is exposed to other processes, or '' when it is not."""
        if self.enabled and self.enforce and self.keystore:
            return ""
        if self.enabled and not self.enforce:
            return (f"{what}: ROS 2 security is enabled but not enforced (ROS_SECURITY_STRATEGY is not Enforce): "
                    "a node without keys still starts unsecured. Set ROS_SECURITY_STRATEGY=Enforce.")
        if self.localhost_only:
            return ""
        return (f"{what} runs WITHOUT ROS 2 security on domain {self.domain_id}, reachable from other machines: any "
                "process on the domain can call reset_estop and operator_verdict, send run_episode goals and "
                "arm_command. Enforce security (ROS_SECURITY_ENABLE=true, ROS_SECURITY_STRATEGY=Enforce, a keystore "
                "with the cell's permissions; needs a DDS built with the security plugins, which the PyPI wheels are "
                "not), or limit discovery to this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST), or keep the "
                "cell on a network of its own. See docs/security.md.")


def cell_security(env: Mapping[str, str]) -> CellSecurity:
    """Read :class:`CellSecurity` from environment variables ``env`` (``os.environ``); ValueError on a bad value."""
    domain = env.get("ROS_DOMAIN_ID", "").strip() or "0"
    try:
        domain_id = int(domain)
    except ValueError as error:
        raise ValueError(f"ROS_DOMAIN_ID={domain!r} is not an integer") from error
    discovery = env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").strip().upper()
    localhost = discovery in ("LOCALHOST", "OFF") or env.get("ROS_LOCALHOST_ONLY", "").strip() == "1"
    return CellSecurity(
        enabled=env.get("ROS_SECURITY_ENABLE", "").strip().lower() == "true",
        enforce=env.get("ROS_SECURITY_STRATEGY", "").strip() == "Enforce",
        keystore=env.get("ROS_SECURITY_KEYSTORE", "").strip(),
        localhost_only=localhost,
        domain_id=domain_id,
    )
