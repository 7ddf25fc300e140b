// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include "coda_core/version.hpp"

namespace coda_core {

const char* version() { return "0.1.0"; }

}  // namespace coda_core
