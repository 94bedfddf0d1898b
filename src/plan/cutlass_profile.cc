// Resource model, profile (b): CUTLASS's block-scaled grouped GEMM as the TensorRT-LLM /
// FlashInfer fused-MoE path instantiates it (type recipe: TensorRT-LLM
// cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/launchers/moe_gemm_tma_ws_launcher.inl).
//
// Every term below is derived from CUTLASS's source (file:line as of CUTLASS commit b46b16d0
// = v4.5, the headers shipped in flashinfer-python 0.7.4) and checked against sizeof() of the
// real types by tests/cutlass_crosscheck:
//
// sm_120 mainloop (gemm/collective/builders/sm120_blockscaled_mma_builder.inl):
//   stage rule (via sm100_blockscaled_umma_builder.inl:59-88, sm100_compute_stage_count_or_
//   override_blockscaled):  S = (C - carveout) / (A + B + SFA + SFB + 128)
//     C = 101376 - 128 (scheduler pipeline) - 256 (2 tensor maps) - 48 (tensor-map-ready pipe)
//         (:233-257; CUTLASS <= 4.4 used the whole 101376 - same stage counts for these tiles)
//     carveout = sizeof(CollectiveEpilogue::SharedStorage)  (StageCountAutoCarveout, launcher)
//     128 = round_up(sizeof(PipelineTmaUmmaAsync<1>::SharedStorage), 128): the builder's
//           charge for a stage's barriers (the real cost is 16 B)
//     SFA = M x K / 16, SFB = max(N, 128) x K / 16 (Sm1xxBlockScaledConfig: 128-row blocks of
//           4 scale factors, SFB padded to 128 rows; :182-209)
//   collective SharedStorage (gemm/collective/sm120_blockscaled_mma_array_tma.hpp:269-287):
//     alignas(1024) A, alignas(1024) B, alignas(16) SFA, alignas(16) SFB, the struct aligned to
//     1024; 4 tensor maps (512 B, the builder reserved 2); PipelineTmaAsync 16 B per stage;
//     static_assert(Stages >= 2): a tile whose rule gives S < 2 does not compile.
// sm_120 epilogue (epilogue/collective/builders/sm120_builder.inl:78-114, 147-196;
//   epilogue/collective/sm90_epilogue_array_tma_warpspecialized.hpp:150-250):
//     epilogue tile 64 x 32; TRT-LLM builds it with a bf16 C on sm_120 (launcher :380, never
//     read at run time); NONE: C and D share 3 stages (12288 B); FINALIZE (void D, the scatter
//     fusion): C 2 stages + D 2 stages (16384 B) + the fusion's row broadcast (bias bf16: 2N B,
//     or with swap-AB the router scales fp32: 4N B; cutlass_extensions sm90_visitor_scatter.hpp);
//     aligned to 512 B (row-major D, SW64) or 1024 B (column-major D with swap-AB, SW128);
//     + 3 tensor maps (384 B) + load pipeline 16 B per C stage.
// sm_120 kernel (gemm/kernel/sm90_gemm_array_tma_warpspecialized_cooperative.hpp:194-228):
//     tensors (mainloop + epilogue, 1024-aligned), pipelines (scheduler 128, mainloop 16 S,
//     epilogue load 16 per C stage, load-order barrier 16), scheduler responses 8 x 16 B,
//     tensor maps 512 + 384, the whole rounded to its 1024-B alignment.
// sm_100 (gemm/collective/builders/sm100_blockscaled_umma_builder.inl:240-264,
//   gemm/kernel/sm100_gemm_array_tma_warpspecialized.hpp:228-293):
//     S = (232448 - KernelSmemCarveout - carveout) / (A + B + SFA + SFB + 128), with
//     KernelSmemCarveout = 3416 B (3400 B for N = 256: one accumulator stage)
//     (collective/builders/sm100_pipeline_carveout.inl:45-83); per-CTA tile (2-SM tiles: M/2,
//     N/2), SFB rows padded to 128 of the whole N; the kernel's pipelines, CLC responses,
//     tensor-map copies (5 x 768 B) precede the tensors at offset 5120 (measured on the real
//     types); epilogue with void C: D 2 stages of 128 x 32 (128 x 64 for N = 256) bf16.
//   For profile (b), a tactic's M x N x K follow CUTLASS (M = A rows, N = B rows, K elements;
//   TRT-LLM's names give K in bytes: 128x128x64B is 128 x 128 x 128). On sm_100, M = 256
//   means the 2-SM tile (cluster 2 x 1 x 1).
#include "plan/cutlass_profile.h"

#include <algorithm>
#include <sstream>

#include "fp4moe/error.h"
#include "plan/report_header.h"

namespace fp4moe {
namespace {

int64_t ru(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct Operands {
  int64_t a = 0, b = 0, sfa = 0, sfb = 0;
  const char* elem = "";
  int sf_vec = 0;
  bool cross_checked = true;
};

// Per-stage operand bytes of an M x N x K tile (N_sf: the rows the SFB tile is padded over).
Operands operands(DataType d, int64_t m, int64_t n, int64_t k, int64_t n_sf) {
  Operands o;
  if (d == DataType::kBf16) {
    o.a = m * k * 2;
    o.b = n * k * 2;
    o.elem = "bf16, 2 B";
    o.cross_checked = false;
    return o;
  }
  o.a = m * k / 2;
  o.b = n * k / 2;
  o.sf_vec = d == DataType::kNvfp4 ? 16 : 32;
  o.sfa = ru(m, 128) * k / o.sf_vec;
  o.sfb = ru(std::max<int64_t>(n_sf, 128), 128) * k / o.sf_vec;
  o.elem = "e2m1, 1/2 B";
  o.cross_checked = d == DataType::kNvfp4;
  return o;
}

void fill_stage_items(ResourceReport& r, const Operands& o, int64_t m, int64_t n, int64_t k, int64_t n_sf) {
  r.stage_items = {{"A: " + std::to_string(m) + " x " + std::to_string(k) + " (" + o.elem + ")", o.a},
                   {"B: " + std::to_string(n) + " x " + std::to_string(k) + " (" + o.elem + ")", o.b}};
  if (o.sf_vec) {
    r.stage_items.push_back({"SFA: " + std::to_string(ru(m, 128)) + " rows x " + std::to_string(k / o.sf_vec) +
                                 " scale factors (128-row blocks)",
                             o.sfa});
    r.stage_items.push_back({"SFB: " + std::to_string(ru(std::max<int64_t>(n_sf, 128), 128)) + " rows x " +
                                 std::to_string(k / o.sf_vec) + " (padded to >= 128 rows)",
                             o.sfb});
  }
  r.stage_bytes = o.a + o.b + o.sfa + o.sfb;
  r.builder_stage_bytes = r.stage_bytes + 128;
}

// `runs_here`: whether the GPU's architecture runs the profile's kernel at all. Where it does
// not, the bytes under this GPU's limit are still worked out (what the same tile would need with
// this capacity: how a Hopper's 227 KB takes the tiles that overflow sm_120's 99 KB), and the
// report says it is not supported, with the reason first.
void verdict(ResourceReport& r, const GpuSpec& gpu, int64_t builder_estimate, const Operands& o, bool runs_here,
             const std::string& needs) {
  std::ostringstream why;
  if (r.stages < 2) {
    r.fits = false;
    why << "does not compile: the carve-out rule leaves " << r.stages << " stage(s) of "
        << r.builder_stage_bytes << " B (static_assert Stages >= 2)";
  } else {
    r.fits = r.total_bytes <= r.limit_bytes;
    why << r.stages << " stages x " << r.stage_bytes << " B + epilogue " << r.epilogue_bytes
        << " B + kernel-level " << r.kernel_bytes << " B (incl. padding) = " << r.total_bytes << " B "
        << (r.fits ? "<= " : "> ") << r.limit_bytes << " B";
    if (!r.fits)
      why << ": over by " << r.total_bytes - r.limit_bytes << " B; the carve-out rule planned "
          << builder_estimate << " B (alignment padding, tensor maps and scheduler state it does not reserve)";
  }
  if (!o.cross_checked) why << " [" << to_string(r.dtype) << ": derived, not cross-checked]";
  r.reason = why.str();
  if (!runs_here) {
    r.supported = false;
    r.reason = needs + ", " + gpu.arch_name() + " cannot run it; with this GPU's capacity: " + r.reason;
  }
  const int64_t per_cta = r.total_bytes + gpu.smem_reserved_per_block;
  r.ctas_per_sm = r.fits ? static_cast<int>(std::min<int64_t>(gpu.smem_per_sm / per_cta,
                                                              gpu.max_threads_per_sm / std::max(1, r.threads)))
                         : 0;
}

}  // namespace

ResourceReport model_cutlass_sm120(const Tactic& t, const GpuSpec& gpu, DataType d, const ModelOptions& opt) {
  ResourceReport r = report_header(t, gpu, d);
  const int64_t m = t.tile_rows, n = t.tile_tokens, k = t.tile_k;
  FP4MOE_CHECK(m % 128 == 0 && n % 32 == 0 && k % 64 == 0, "cutlass_sm120 tile ", m, "x", n, "x", k,
               ": M must be a multiple of 128, N of 32, K of 64");
  r.threads = 384;  // 8 MMA warps (cooperative 4 x 2) + 1 producer warp group
  const Operands o = operands(d, m, n, k, n);
  fill_stage_items(r, o, m, n, k, n);
  // Epilogue (tile 64 x 32, bf16 C and D).
  const bool finalize = t.epilogue == Epilogue::kFinalize;
  const int64_t align = t.swap_ab ? 1024 : 512;
  const int64_t stages_c = finalize ? 2 : 3;
  const int64_t collective = finalize ? 2 * 64 * 32 * 2 + 2 * 64 * 32 * 2 : 3 * 64 * 32 * 2;
  const int64_t fusion = finalize ? (t.swap_ab ? 4 * n : 2 * n) : 1;
  const int64_t epi_tensors = ru(collective + fusion, align);
  const int64_t carveout = ru(epi_tensors + 384 + 16 * stages_c, align);
  r.epilogue_bytes = epi_tensors;
  // Stage rule.
  const int64_t capacity = opt.cutlass_version >= 45 ? gpu.smem_per_block_optin - 128 - 256 - 48
                                                      : gpu.smem_per_block_optin;
  r.stages_auto = t.stages == 0;
  r.stages = r.stages_auto ? static_cast<int>((capacity - carveout) / r.builder_stage_bytes) : t.stages;
  const int64_t s = r.stages;
  // Mainloop tensors: alignas(1024) A, alignas(1024) B, alignas(16) SFA, SFB; struct to 1024.
  const int64_t ml = ru(ru(ru(ru(s * o.a, 1024) + s * o.b, 16) + s * o.sfa, 16) + s * o.sfb, 1024);
  r.mainloop_bytes = ml;
  const int64_t tensors = ru(ml + epi_tensors, 1024);
  const int64_t pipelines = 128 + 16 * s + 16 * stages_c + 16;
  const int64_t with_responses = ru(tensors + pipelines + 8 * 16, 128);
  r.total_bytes = ru(with_responses + 512 + 384, 1024);
  r.kernel_bytes = r.total_bytes - ml - epi_tensors;
  r.other_items = {
      {"epilogue tensors: " + std::string(finalize ? "C 2 + D 2 stages of 64x32 bf16 + " + std::string(t.swap_ab ? "router scales 4N" : "bias 2N")
                                                   : "C/D 3 stages of 64x32 bf16") + ", aligned " + std::to_string(align),
       epi_tensors},
      {"carve-out = sizeof(epilogue SharedStorage) (+384 tensor maps, +" + std::to_string(16 * stages_c) + " pipeline)", carveout},
      {"mainloop tensors: " + std::to_string(s) + " stages, A/B aligned 1024, struct aligned 1024", ml},
      {"kernel tensors (mainloop + epilogue) aligned 1024", tensors},
      {"pipelines: scheduler 128 + mainloop 16 x " + std::to_string(s) + " + epilogue load 16 x " +
           std::to_string(stages_c) + " + load order 16",
       pipelines},
      {"scheduler responses 8 x 16, aligned 128", with_responses - tensors - pipelines},
      {"tensor maps: mainloop 4 x 128 + epilogue 3 x 128", 896},
      {"SharedStorage rounded to its 1024-B alignment", r.total_bytes - with_responses - 896},
  };
  const int64_t builder_estimate = (gpu.smem_per_block_optin - capacity) + carveout + s * r.builder_stage_bytes;
  verdict(r, gpu, builder_estimate, o, gpu.has_block_scaled_mma_sync(),
          "cutlass_sm120 is sm_120/sm_121 code (block-scaled mma.sync)");
  return r;
}

ResourceReport model_cutlass_sm100(const Tactic& t, const GpuSpec& gpu, DataType d, const ModelOptions& opt) {
  (void)opt;
  ResourceReport r = report_header(t, gpu, d);
  const bool two_sm = t.tile_rows == 256;
  const int64_t m_cta = two_sm ? 128 : t.tile_rows, n = t.tile_tokens, k = t.tile_k;
  const int64_t n_cta = two_sm ? n / 2 : n;
  FP4MOE_CHECK(m_cta == 128 && n % 32 == 0 && k % 128 == 0, "cutlass_sm100 tile ", t.tile_rows, "x", n, "x",
               k, ": M must be 128 (256: 2-SM), N a multiple of 32, K of 128");
  r.threads = 192;  // MMA, producer, 4 epilogue warps
  const Operands o = operands(d, m_cta, n_cta, k, n);
  fill_stage_items(r, o, m_cta, n_cta, k, n);
  const bool finalize = t.epilogue == Epilogue::kFinalize;
  const int64_t ep_n = n == 256 ? 64 : 32;  // TRT-LLM forces 128 x 64 for FP4 with N = 256
  const int64_t align = (t.swap_ab || ep_n == 64) ? 1024 : 512;
  const int64_t epi_tiles = (m_cta / 128) * (n_cta / ep_n);
  const int64_t stages_d = std::min<int64_t>(epi_tiles, 2), stages_c = std::min<int64_t>(epi_tiles, 4);
  const int64_t fusion = finalize ? (t.swap_ab ? 4 * n : 2 * n) : 1;
  const int64_t epi_tensors = ru(stages_d * 128 * ep_n * 2 + fusion, align);
  const int64_t carveout = ru(epi_tensors + 256 + 16 * stages_c, 1024);
  const int64_t kernel_carveout = n == 256 ? 3400 : 3416;
  r.epilogue_bytes = epi_tensors;
  r.stages_auto = t.stages == 0;
  r.stages = r.stages_auto
                 ? static_cast<int>((gpu.smem_per_block_optin - kernel_carveout - carveout) / r.builder_stage_bytes)
                 : t.stages;
  const int64_t s = r.stages;
  r.mainloop_bytes = s * r.stage_bytes;
  constexpr int64_t kKernelPrefix = 5120;  // pipelines, CLC responses, 5 tensor-map copies
  r.total_bytes = kKernelPrefix + ru(r.mainloop_bytes + epi_tensors, align);
  r.kernel_bytes = r.total_bytes - r.mainloop_bytes - epi_tensors;
  r.other_items = {
      {"epilogue tensors: D " + std::to_string(stages_d) + " stages of 128x" + std::to_string(ep_n) +
           " bf16 (C void) + " + (finalize ? (t.swap_ab ? "router scales 4N" : "bias 2N") : "fusion 1") +
           ", aligned " + std::to_string(align),
       epi_tensors},
      {"carve-out = sizeof(epilogue SharedStorage)", carveout},
      {"KernelSmemCarveout reserved by the builder", kernel_carveout},
      {"mainloop tensors: " + std::to_string(s) + " stages", r.mainloop_bytes},
      {"kernel prefix (pipelines, CLC responses, tensor maps) + alignment", r.kernel_bytes},
  };
  const int64_t builder_estimate = kernel_carveout + carveout + s * r.builder_stage_bytes;
  verdict(r, gpu, builder_estimate, o, gpu.has_tcgen05(), "cutlass_sm100 is sm_100/sm_103 code (tcgen05)");
  return r;
}

}  // namespace fp4moe
