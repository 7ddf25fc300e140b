#!/usr/bin/env bash
# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
#
# Set up everything the workspace needs, from nothing, idempotently:
#   1. .venv with Python 3.11 (ROS 2 Kilted wheels are cp311)
#   2. torch==2.13.0 (CPU) first, then the ROS 2 wheels (unless a ROS 2 distribution is sourced)
#      and the project's packages, all pinned by requirements/constraints.txt
#   3. repair of the wheels' CMake export paths
#   4. colcon build of src/ into build/ and install/
#   5. the `coda` command in .venv/bin
# A second run with nothing changed only checks stamps and finishes in seconds.
#
# Options: --force   reinstall packages and rebuild
#          --freeze  rewrite requirements/constraints.txt from the current venv
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
FORCE=0
FREEZE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --freeze) FREEZE=1 ;;
    *) echo "bootstrap: unknown option '$arg' (known: --force, --freeze)" >&2; exit 2 ;;
  esac
done

log() { printf '[bootstrap %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# ---------------------------------------------------------------- 1. interpreter and venv
if [ -n "${ROS_DISTRO:-}" ]; then
  MODE="system-ros-${ROS_DISTRO}"
  PYTHON="${CODA_PYTHON:-$(command -v python3)}"
else
  MODE="wheels-kilted"
  PYTHON="${CODA_PYTHON:-}"
  if [ -z "$PYTHON" ]; then
    for cand in python3.11 python3; do
      if command -v "$cand" >/dev/null 2>&1 && \
         "$cand" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
        PYTHON="$(command -v "$cand")"; break
      fi
    done
  fi
  if [ -z "$PYTHON" ]; then
    echo "bootstrap: Python 3.11 not found; the ROS 2 Kilted wheels need CPython 3.11 (set CODA_PYTHON)." >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV ($MODE, $("$PYTHON" --version 2>&1))"
  if [ "$MODE" = "wheels-kilted" ]; then
    "$PYTHON" -m venv "$VENV"
  else
    # A sourced ROS 2 install provides rclpy, colcon and the message packages.
    "$PYTHON" -m venv --system-site-packages "$VENV"
  fi
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)

# ---------------------------------------------------------------- 2. packages
STAMP_PKGS="$VENV/.coda-packages.stamp"
pkg_key="$MODE $(cat requirements/constraints.txt requirements/*.in scripts/bootstrap.sh | sha256sum | cut -c1-16)"
if [ "$FORCE" = 1 ] || [ ! -f "$STAMP_PKGS" ] || [ "$(cat "$STAMP_PKGS")" != "$pkg_key" ]; then
  log "installing packages ($MODE)"
  # pip's own noise about the machine's extra package folders is filtered, errors are not.
  quiet() {
    local rc
    set +e +o pipefail
    "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"
    rc=${PIPESTATUS[0]}
    set -e -o pipefail
    return "$rc"
  }
  quiet "${PIP[@]}" install -c requirements/constraints.txt "pip==25.3" "setuptools" "wheel"
  # torch first, pinned: anything that depends on torch must find it already satisfied.
  quiet "${PIP[@]}" install "torch==2.13.0"
  if [ "$MODE" = "wheels-kilted" ]; then
    quiet "${PIP[@]}" install -c requirements/constraints.txt -r requirements/ros-wheels.in
  fi
  quiet "${PIP[@]}" install -c requirements/constraints.txt -r requirements/project.in
  # Only the model files of this package are used; its dependencies are not needed.
  quiet "${PIP[@]}" install --no-deps "$(grep -i '^dm-robotics-panda==' requirements/constraints.txt)"
  "$PY" -c 'import torch, mujoco, rclpy' || { echo "bootstrap: import check failed" >&2; exit 1; }
  if [ "$MODE" = "wheels-kilted" ]; then
    "$PY" scripts/repair_ros_wheels.py "$VENV"
  fi
  echo "$pkg_key" > "$STAMP_PKGS"
else
  log "packages up to date ($MODE)"
fi

if [ "$FREEZE" = 1 ]; then
  {
    echo "# Every Python package of the environment, pinned. Regenerate with scripts/bootstrap.sh --freeze."
    echo "# dm-robotics-panda is installed separately with --no-deps (it carries only the Panda model files)."
    "${PIP[@]}" freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu/torch==\1/'
  } > requirements/constraints.txt
  log "requirements/constraints.txt rewritten"
  echo "$MODE $(cat requirements/constraints.txt requirements/*.in scripts/bootstrap.sh | sha256sum | cut -c1-16)" > "$STAMP_PKGS"
fi

# ---------------------------------------------------------------- 3. colcon build
# shellcheck source=scripts/env.sh
source "$ROOT/scripts/env.sh" --no-install
STAMP_BUILD="$ROOT/install/.coda-build.stamp"
need_build=1
if [ "$FORCE" = 0 ] && [ -f "$STAMP_BUILD" ] && [ -f "$ROOT/install/setup.bash" ]; then
  # Rebuild when any source file is newer than the last successful build.
  if [ -z "$(find src -type f -newer "$STAMP_BUILD" -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -not -name '*.pyc' -print -quit)" ] \
     && [ "$STAMP_PKGS" -ot "$STAMP_BUILD" ]; then
    need_build=0
  fi
fi
if [ "$need_build" = 1 ]; then
  log "colcon build"
  CMAKE_ARGS=(-DPython3_EXECUTABLE="$PY" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  colcon --log-base "$ROOT/log" build --base-paths src --build-base "$ROOT/build" --install-base "$ROOT/install" \
    --symlink-install --event-handlers console_cohesion- summary+ status- \
    --cmake-args "${CMAKE_ARGS[@]}"
  touch "$STAMP_BUILD"
else
  log "build up to date"
fi

# ---------------------------------------------------------------- 4. the coda command
CODA_BIN="$VENV/bin/coda"
cat > "$CODA_BIN.tmp" <<WRAP
#!/usr/bin/env bash
# Generated by scripts/bootstrap.sh: runs the coda CLI inside the workspace environment.
source "$ROOT/scripts/env.sh" --no-install
exec python -m coda_loop.cli "\$@"
WRAP
chmod +x "$CODA_BIN.tmp"
mv "$CODA_BIN.tmp" "$CODA_BIN"
log "ready: source scripts/env.sh, or run .venv/bin/coda --help"
