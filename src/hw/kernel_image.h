// kernel_image.h - whether the CUDA runtime has machine code of a kernel for a live GPU, asked of
// the runtime itself (build_support_for asks it of one of the library's kernels; the GPU tests
// also of kernels built for one architecture alone).
#pragma once

#include <string>

#include "fp4moe/hw.h"

namespace fp4moe::detail {

// `kernel` is a __global__ function's host address; `targets` the run targets it was built for
// ("80;90a"), named in `why` with the target to add where the runtime has no image for `gpu`.
// Other CUDA failures throw. Needs a CUDA build; without it the answer is "built without CUDA".
BuildSupport kernel_image_support(const void* kernel, const GpuSpec& gpu, const std::string& targets);

}  // namespace fp4moe::detail
