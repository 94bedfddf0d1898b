// fp4moe tactics: which tiles fit which GPU, in bytes, and why.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/validators.h"
#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/moe.h"
#include "fp4moe/resource_model.h"

namespace fp4moe::cli {
namespace {

struct TacticsArgs {
  std::string gpu = "current";
  std::string family = "all";
  std::string epilogue = "finalize";
  std::string dtype = "nvfp4";
  int experts = 257;
  bool no_shared_expert = false;
  int tokens = 8;  // w4a16_gemv: the batch it stages, the GEMM's K, slots per token
  int k = 6144;    // given: both GEMMs'; else glm5's per GEMM (FC1 the hidden 6144, FC2 the
  bool k_given = false;  // intermediate 2048)
  int slots = 9;
  bool json = false;
  bool explain = false;
};

std::vector<Family> families(const std::string& f) {
  if (f == "all")
    return {Family::kW4a16Mma, Family::kW4a16Wgmma, Family::kW4a16Gemv, Family::kW4a16Fused, Family::kCutlassSm120,
            Family::kCutlassSm100};
  if (f == "w4a16_mma") return {Family::kW4a16Mma};
  if (f == "w4a16_wgmma") return {Family::kW4a16Wgmma};
  if (f == "w4a16_gemv") return {Family::kW4a16Gemv};
  if (f == "w4a16_fused") return {Family::kW4a16Fused};
  if (f == "cutlass_sm120") return {Family::kCutlassSm120};
  if (f == "cutlass_sm100") return {Family::kCutlassSm100};
  FP4MOE_FAIL("--family '", f,
              "': expected w4a16_mma, w4a16_wgmma, w4a16_gemv, w4a16_fused, cutlass_sm120, cutlass_sm100 or all");
}

Epilogue epilogue_of(const std::string& e) {
  if (e == "finalize") return Epilogue::kFinalize;
  if (e == "none") return Epilogue::kNone;
  if (e == "swiglu") return Epilogue::kSwiglu;
  FP4MOE_FAIL("--epilogue '", e, "': expected finalize, none or swiglu");
}

nlohmann::json items_json(const std::vector<SmemItem>& items) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& i : items) a.push_back({{"what", i.what}, {"bytes", i.bytes}});
  return a;
}

void run_tactics(const TacticsArgs& a) {
  GpuSpec gpu;
  try {
    gpu = resolve_gpu(a.gpu);
  } catch (const Error& e) {
    if (a.gpu == "current")
      FP4MOE_FAIL(e.what(), "; pass --gpu NAME (", "a100, h100, h200, b200, rtx-pro-6000, rtx-5090, gb10)");
    throw;
  }
  // On a live GPU each row also gets the runtime's figures for our compiled kernel, where this
  // build's machine code runs there; and the GPU modelled is the one the layer plans for: where
  // the driver JIT-compiles an earlier version's PTX (80-virtual on an H100), that version's
  // (no wgmma, no fused kernel), as the layer and the tuner see it.
  const BuildSupport support = gpu.live ? build_support_for(gpu) : BuildSupport{};
  const int real_sm = gpu.sm;
  if (gpu.live) gpu = gpu_for_build(gpu, support);
  const DataType dtype = parse_data_type(a.dtype);
  Epilogue ep = epilogue_of(a.epilogue);
  ModelOptions opt;
  opt.experts = a.experts;
  opt.shared_expert = !a.no_shared_expert;
  opt.tokens = a.tokens;
  opt.k = a.k;
  opt.slots = a.slots;
  nlohmann::json out = nlohmann::json::array();
  if (!a.json)
    std::printf("%s (%s, %d SMs): per-block shared memory limit %lld B (opt-in), %lld B per SM; %s, "
                "epilogue %s%s\n(CTAs: per SM, by shared memory and threads as modelled)\n\n",
                gpu.name.c_str(), gpu.arch_name().c_str(), gpu.sm_count,
                static_cast<long long>(gpu.smem_per_block_optin), static_cast<long long>(gpu.smem_per_sm),
                to_string(dtype), a.epilogue.c_str(),
                ep == Epilogue::kFinalize ? " (FC2; the decode, small-batch and fused families list FC1's swiglu too)"
                                          : "");
  if (gpu.sm != real_sm && !a.json)
    std::printf("modelled as sm_%d: the GPU is sm_%d, and this build runs there as sm_%d code (JIT-compiled "
                "PTX); the layer plans for that\n\n",
                gpu.sm, real_sm, gpu.sm);
  if (gpu.live && !support.runs && !a.json)
    std::printf("no measured figures: %s\n\n", support.why.c_str());
  for (Family f : families(a.family)) {
    // Our decode family has no NONE epilogue in the layer; show FC1's SwiGLU beside FINALIZE.
    std::vector<Epilogue> eps = {ep};
    if ((f == Family::kW4a16Mma || f == Family::kW4a16Gemv) && ep == Epilogue::kFinalize)
      eps = {Epilogue::kSwiglu, Epilogue::kFinalize};
    // One w4a16_fused kernel is the whole layer: listed once, under FC1's name (it has no none).
    if (f == Family::kW4a16Fused) eps = ep == Epilogue::kNone ? std::vector<Epilogue>{} : std::vector{Epilogue::kSwiglu};
    std::vector<Tactic> rows;
    for (Epilogue e : eps)
      for (const Tactic& t : listed_tactics(f, e)) rows.push_back(t);
    if (rows.empty()) {  // (w4a16_wgmma, w4a16_gemv and w4a16_fused have no epilogue none)
      if (!a.json) std::printf("%s: no tactics with epilogue %s\n\n", to_string(f), a.epilogue.c_str());
      continue;
    }
    if (!a.json) {
      std::printf("%-56s %8s %6s %8s %8s %8s %8s %5s  %-8s %s\n", "tactic", "B/stage", "stages", "epi B",
                  "kernel B", "total B", "limit B", "CTAs", "verdict", "reason");
    }
    for (const Tactic& t : rows) {
      // The finalize GEMM is FC2, whose K is the intermediate size: glm5's unless --k was given.
      ModelOptions row_opt = opt;
      if (!a.k_given && t.epilogue == Epilogue::kFinalize) row_opt.k = MoeConfig::glm5().intermediate;
      const ResourceReport r = model_resources(t, gpu, dtype, row_opt);
      std::optional<CompiledKernelInfo> live;
      if (support.runs) live = query_compiled_kernel(t, row_opt, gpu.device_index);  // --gpu current:N's device
      const char* verdict = !r.supported ? "n/a" : r.fits ? "fits" : "NO FIT";
      if (a.json) {
        nlohmann::json j = {{"tactic", format_tactic(t)}, {"gpu", gpu.name}, {"dtype", to_string(dtype)},
                            {"supported", r.supported}, {"stage_bytes", r.stage_bytes},
                            {"builder_stage_bytes", r.builder_stage_bytes}, {"stages", r.stages},
                            {"stages_auto", r.stages_auto}, {"mainloop_bytes", r.mainloop_bytes},
                            {"epilogue_bytes", r.epilogue_bytes}, {"kernel_bytes", r.kernel_bytes},
                            {"total_bytes", r.total_bytes}, {"limit_bytes", r.limit_bytes},
                            {"fits", r.fits}, {"reason", r.reason}, {"ctas_per_sm", r.ctas_per_sm},
                            {"stage_items", items_json(r.stage_items)}, {"other_items", items_json(r.other_items)}};
        if (live)
          j["measured"] = {{"registers", live->registers}, {"static_smem", live->static_smem},
                           {"dynamic_smem", live->dynamic_smem}, {"ctas_per_sm", live->ctas_per_sm}};
        out.push_back(j);
        continue;
      }
      std::printf("%-56s %8lld %4d%s %8lld %8lld %8lld %8lld %5d  %-8s %s\n", format_tactic(t).c_str(),
                  static_cast<long long>(r.stage_bytes), r.stages, r.stages_auto ? "a" : " ",
                  static_cast<long long>(r.epilogue_bytes), static_cast<long long>(r.kernel_bytes),
                  static_cast<long long>(r.total_bytes), static_cast<long long>(r.limit_bytes), r.ctas_per_sm,
                  verdict, r.reason.c_str());
      if (live)
        std::printf("%-56s measured: %d registers, %lld B static + %lld B dynamic shared memory, %d CTAs/SM\n",
                    "", live->registers, static_cast<long long>(live->static_smem),
                    static_cast<long long>(live->dynamic_smem), live->ctas_per_sm);
      if (a.explain) {
        for (const auto& i : r.stage_items)
          std::printf("%-56s   per stage  %8lld  %s\n", "", static_cast<long long>(i.bytes), i.what.c_str());
        for (const auto& i : r.other_items)
          std::printf("%-56s              %8lld  %s\n", "", static_cast<long long>(i.bytes), i.what.c_str());
      }
    }
    if (!a.json) std::printf("\n");
  }
  if (a.json) std::printf("%s\n", out.dump(2).c_str());
  else
    std::printf("stages 'a': chosen by the family's carve-out rule. cutlass_* rows model CUTLASS's block-scaled "
                "grouped GEMM as TensorRT-LLM / FlashInfer build it (M x N x K in elements; their tile names give "
                "K in bytes). --explain prints the arithmetic.\n");
}

}  // namespace

void register_tactics(CLI::App& app) {
  auto a = std::make_shared<TacticsArgs>();
  auto* cmd = app.add_subcommand("tactics", "Shared-memory model of each tactic on a GPU: fits or not, and why");
  cmd->add_option("--gpu", a->gpu, "GPU: a table name (a100, h100, h200, b200, rtx-pro-6000, rtx-5090, gb10) or current[:N]");
  // Checked as parsed, so that a bad name is refused before any of the table is printed.
  cmd->add_option("--family", a->family,
                  "w4a16_mma, w4a16_wgmma, w4a16_gemv, w4a16_fused, cutlass_sm120, cutlass_sm100, or all")
      ->check(CLI::IsMember({"w4a16_mma", "w4a16_wgmma", "w4a16_gemv", "w4a16_fused", "cutlass_sm120", "cutlass_sm100",
                             "all"}));
  cmd->add_option("--epilogue", a->epilogue, "finalize, none or swiglu")
      ->check(CLI::IsMember({"finalize", "none", "swiglu"}));
  cmd->add_option("--dtype", a->dtype, "Operand type: nvfp4, mxfp4, bf16")->check(CLI::IsMember({"nvfp4", "mxfp4", "bf16"}));
  cmd->add_option("--experts", a->experts,
                  "Groups of the grouped GEMM (w4a16_mma scheduler state): the routed experts and, unless "
                  "--no-shared-expert, the shared one")
      ->transform(IntegerIn(1, 1025));
  cmd->add_flag("--no-shared-expert", a->no_shared_expert,
                "Every group is a routed expert (the small-batch and fused families route 256 at most)");
  cmd->add_option("--tokens", a->tokens, "w4a16_gemv: tokens of the batch it stages")->transform(IntegerIn(1, 8));
  cmd->add_option("--k", a->k, "w4a16_gemv: the GEMM's K, for both epilogues' rows (default: glm5's, FC1 6144, FC2 2048)")
      ->transform(MultipleOf(16, 1 << 20, 16, "the NVFP4 block size"))
      ->default_str("");  // (the default differs by epilogue: the text says it)
  cmd->add_option("--slots", a->slots, "w4a16_gemv, w4a16_fused: slots per token (top-k, +1 with a shared expert)")
      ->transform(IntegerIn(1, 33));
  auto* json = cmd->add_flag("--json", a->json, "JSON instead of the table (every term of the arithmetic included)");
  cmd->add_flag("--explain", a->explain, "Print every term of the arithmetic")->excludes(json);
  cmd->callback([a, cmd] {
    // The batch options size only the families that stage it: the small-batch family its
    // tokens' rows (T x K), both it and the fused family their routing (slots); given for another
    // family, they would change nothing in its rows.
    for (const char* o : {"--tokens", "--k"})
      FP4MOE_CHECK(cmd->count(o) == 0 || a->family == "all" || a->family == "w4a16_gemv", o,
                   " sizes the batch w4a16_gemv stages; --family ", a->family, " does not read it");
    a->k_given = cmd->count("--k") > 0;
    FP4MOE_CHECK(cmd->count("--slots") == 0 || a->family == "all" || a->family == "w4a16_gemv" ||
                     a->family == "w4a16_fused",
                 "--slots sizes the routing w4a16_gemv and w4a16_fused stage; --family ", a->family,
                 " does not read it");
    run_tactics(*a);
  });
}

}  // namespace fp4moe::cli
