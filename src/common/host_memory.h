// How much host memory the machine can still give (Linux: MemAvailable), so that a command asked
// for more than that fails up front with the sizes in its message instead of a std::bad_alloc
// (or the OOM killer) halfway through.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "common/byte_size.h"
#include "fp4moe/error.h"

namespace fp4moe {

// Bytes the kernel reports as available for new allocations (MemAvailable in /proc/meminfo);
// where that is not readable, the free physical pages. -1 where neither is known.
inline int64_t available_host_bytes() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);) {
    std::istringstream fields(line);
    std::string key;
    int64_t kb = -1;
    if (fields >> key >> kb && key == "MemAvailable:" && kb >= 0) return kb * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t{pages} * page : -1;
}

// Throws when `bytes` exceed what is available: "<what> needs ~X GB of host memory; Y GB are
// available" (MB below a GB). Silent where the available memory is unknown.
inline void require_host_memory(double bytes, const std::string& what) {
  const int64_t avail = available_host_bytes();
  if (avail < 0 || bytes <= static_cast<double>(avail)) return;
  FP4MOE_FAIL(what, " needs ~", byte_size(bytes), " of host memory; ", byte_size(static_cast<double>(avail)),
              " are available");
}

}  // namespace fp4moe
