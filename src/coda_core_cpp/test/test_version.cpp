// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <cstring>

#include "coda_core/version.hpp"

int main() {
  if (std::strcmp(coda_core::version(), "0.1.0") != 0) {
    std::fprintf(stderr, "unexpected version %s\n", coda_core::version());
    return 1;
  }
  return 0;
}
