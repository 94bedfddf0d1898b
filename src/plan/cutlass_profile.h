// Resource model profile (b): CUTLASS's block-scaled grouped GEMM on sm_120 and sm_100 as the
// TensorRT-LLM / FlashInfer fused-MoE path builds it (cutlass_profile.cc has the derivation).
#pragma once

#include "fp4moe/resource_model.h"

namespace fp4moe {

ResourceReport model_cutlass_sm120(const Tactic& t, const GpuSpec& gpu, DataType d, const ModelOptions& opt);
ResourceReport model_cutlass_sm100(const Tactic& t, const GpuSpec& gpu, DataType d, const ModelOptions& opt);

}  // namespace fp4moe
