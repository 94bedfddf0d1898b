// median: the one statistic every timing here reports.
#pragma once

#include <algorithm>
#include <vector>

namespace fp4moe {

// The middle value (the upper one of an even count). Empty input is the caller's bug.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace fp4moe
