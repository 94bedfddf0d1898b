// The ranges a ModelOptions must lie in, for the resource model and for query_compiled_kernel:
// every size formed from them (stage bytes, scheduler state, the batch staged) then fits an int
// and is positive.
#pragma once

#include "fp4moe/resource_model.h"

namespace fp4moe {

// Throws fp4moe::Error, its message begun by `who`, naming the first option out of range.
void check_model_options(const ModelOptions& opt, const char* who);

}  // namespace fp4moe
