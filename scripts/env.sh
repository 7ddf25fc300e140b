#!/usr/bin/env bash
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
#
# Source this file to enter the workspace environment: the venv, the ROS 2 prefix it holds
# (or the sourced ROS 2 distribution), and the colcon install space.
#   source scripts/env.sh              # also works from any directory
# With --no-install the install space is not required to exist (used by bootstrap.sh).
_coda_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VIRTUAL_ENV="$_coda_root/.venv"
case ":$PATH:" in *":$VIRTUAL_ENV/bin:"*) ;; *) export PATH="$VIRTUAL_ENV/bin:$PATH" ;; esac
if [ -z "${ROS_DISTRO:-}" ] || [ "${_CODA_WHEELS:-0}" = 1 ]; then
  # The venv is the ROS prefix. AMENT_PREFIX_PATH must hold it before install/setup.bash is
  # sourced: the venv has no local_setup file, so the workspace setup would not chain it.
  export _CODA_WHEELS=1
  # Without a sourced distribution the venv is the only ROS prefix: entries left by another checkout's
  # env.sh are dropped, so two workspaces never mix.
  export AMENT_PREFIX_PATH="$VIRTUAL_ENV"
  export CMAKE_PREFIX_PATH="$VIRTUAL_ENV"
  unset COLCON_PREFIX_PATH
  export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
fi
if [ -f "$_coda_root/install/setup.bash" ]; then
  # The generated setup scripts read unset variables; relax nounset while sourcing them.
  case "$-" in *u*) _coda_nounset=1; set +u ;; *) _coda_nounset=0 ;; esac
  # shellcheck disable=SC1091
  source "$_coda_root/install/setup.bash"
  [ "$_coda_nounset" = 1 ] && set -u
  unset _coda_nounset
elif [ "${1:-}" != "--no-install" ]; then
  echo "scripts/env.sh: $_coda_root/install/setup.bash is missing; run 'make setup' first" >&2
fi
# Headless rendering and offline models.
export MUJOCO_GL="${MUJOCO_GL:-egl}"
export PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
# Fast DDS: a participant killed without leaving (SIGKILL, a crash) drops out of discovery after 3 s, not 20 s; until
# then goals and requests sent to its servers are lost (src/coda_engine/config/dds/fastdds.xml says more).
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$_coda_root/src/coda_engine/config/dds/fastdds.xml}"
export CODA_ROOT="$_coda_root"
unset _coda_root
