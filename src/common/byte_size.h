// A byte count as messages print it: in GB from a GB up, in MB below ("0.00 GB" said nothing of a
// small layer's weights, a nearly full disk or a nearly full host memory).
#pragma once

#include <cstdio>
#include <string>

namespace fp4moe {

inline std::string byte_size(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

}  // namespace fp4moe
