// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// Small helpers for rosidl C messages: an owning holder and string assignment without reallocating.
#pragma once

#include <rosidl_runtime_c/string.h>
#include <rosidl_runtime_c/string_functions.h>

#include <cstring>
#include <new>
#include <string>
#include <string_view>

namespace coda_rt {

// A rosidl C message, initialised by its __init and released by its __fini.
template <typename T>
class Message {
 public:
  Message(bool (*init)(T*), void (*fini)(T*)) : fini_(fini) {
    if (!init(&msg_)) throw std::bad_alloc();
  }
  ~Message() { fini_(&msg_); }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  T* get() { return &msg_; }
  T& operator*() { return msg_; }
  T* operator->() { return &msg_; }

 private:
  T msg_{};
  void (*fini_)(T*);
};

// Sets a rosidl string; leaves it alone when it already holds `text` (no allocation per tick).
inline void assign(rosidl_runtime_c__String& s, std::string_view text) {
  if (s.data && s.size == text.size() && std::memcmp(s.data, text.data(), text.size()) == 0) return;
  if (!rosidl_runtime_c__String__assignn(&s, text.data(), text.size())) throw std::bad_alloc();
}

}  // namespace coda_rt
