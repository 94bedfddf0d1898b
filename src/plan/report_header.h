// The identity fields every resource-model profile fills first: which tactic, dtype and GPU a
// report is about, and the GPU's per-block limit it is judged against.
#pragma once

#include "fp4moe/resource_model.h"

namespace fp4moe {

inline ResourceReport report_header(const Tactic& t, const GpuSpec& gpu, DataType dtype) {
  ResourceReport r;
  r.tactic = t;
  r.dtype = dtype;
  r.gpu = gpu.name;
  r.sm = gpu.sm;
  r.limit_bytes = gpu.smem_per_block_optin;
  return r;
}

}  // namespace fp4moe
