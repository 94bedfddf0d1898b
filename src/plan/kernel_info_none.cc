// query_compiled_kernel in a build without CUDA: nothing is compiled, nothing can be known.
#include "fp4moe/resource_model.h"

namespace fp4moe {

std::optional<CompiledKernelInfo> query_compiled_kernel(const Tactic&, const ModelOptions&, int) { return std::nullopt; }

}  // namespace fp4moe
