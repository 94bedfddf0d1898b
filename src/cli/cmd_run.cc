// fp4moe run: one MoE layer on seeded random NVFP4 weights (full preset shapes), on the GPU when
// there is one (else the float64 CPU reference); prints the time and an output checksum, and
// with --compare-reference the GPU output's error against the reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/cuda_device.h"
#include "common/byte_size.h"
#include "cli/printable.h"
#include "bench/roofline.h"
#include "cli/shape_options.h"
#include "cli/validators.h"
#include "common/host_memory.h"
#include "common/parallel.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/synthetic.h"
#include "io/checkpoint.h"
#include "io/modelopt.h"
#include "io/npy.h"
#include "io/text_file.h"

namespace fp4moe::cli {
namespace {

struct RunArgs {
  ShapeArgs shape;
  int64_t tokens = 4;
  uint64_t seed = 1;
  int threads = 0;
  double skew = 0;
  std::string device = "auto";
  CudaDeviceArg cuda;  // --cuda-device: which GPU
  bool compare = false;
  int iters = 20;
  bool iters_given = false;  // --iters typed: refused where no GPU runs (it would be ignored)
  std::string checkpoint, input, output, output_dtype = "f32";
  int layer = -1;
};

int count_distinct(const std::vector<int32_t>& ids) {
  std::vector<int32_t> v = ids;
  std::sort(v.begin(), v.end());
  return static_cast<int>(std::unique(v.begin(), v.end()) - v.begin());
}

// FNV-1a over the bf16 bits of the output: equal outputs give equal checksums.
uint64_t bf16_checksum(const std::vector<uint16_t>& bits) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint16_t b : bits) {
    h = (h ^ (b & 0xFF)) * 0x100000001b3ull;
    h = (h ^ (b >> 8)) * 0x100000001b3ull;
  }
  return h;
}

std::vector<uint16_t> to_bf16(const std::vector<double>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = Bf16::from_float(static_cast<float>(v[i])).bits;
  return b;
}

void print_output(const std::vector<uint16_t>& bits, int64_t tokens, int64_t hidden) {
  double sum_abs = 0, max_abs = 0;
  int64_t non_finite = 0;
  for (uint16_t b : bits) {
    const double v = Bf16::from_bits(b).to_float();
    if (!std::isfinite(v)) { ++non_finite; continue; }
    sum_abs += std::fabs(v);
    max_abs = std::max(max_abs, std::fabs(v));
  }
  std::printf("output [%lld, %lld] bf16: checksum %016llx  mean |out| %.6f  max |out| %.6f%s\n",
              static_cast<long long>(tokens), static_cast<long long>(hidden),
              static_cast<unsigned long long>(bf16_checksum(bits)), sum_abs / bits.size(), max_abs,
              non_finite ? "  NON-FINITE VALUES" : "");
  FP4MOE_CHECK(non_finite == 0, non_finite, " output values are not finite");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_config(const MoeConfig& cfg) {
  std::printf("layer %s: H %lld, I %lld, E %d, top-%d %s (n_group %d, topk_group %d, scale %.2f)"
              ", shared expert I %lld\n",
              printable(cfg.name).c_str(), static_cast<long long>(cfg.hidden), static_cast<long long>(cfg.intermediate),
              cfg.num_experts, cfg.routing.top_k, to_string(cfg.routing.mode), cfg.routing.n_group,
              cfg.routing.topk_group, cfg.routing.routed_scaling_factor,
              static_cast<long long>(cfg.shared_intermediate));
}

// (only a GPU run has an output to compare: a build without CUDA has no caller)
[[maybe_unused]] double relative_error(const std::vector<uint16_t>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = Bf16::from_bits(got[i]).to_float() - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// Host bytes the run holds for `tokens` tokens at its peak: its inputs (fp32 hidden states,
// router logits, the routing), the bf16 output and its copy, the float64 reference where it
// runs, and the seeded experts it materialises (all of them for the GPU). An estimate within
// tens of percent, so that a batch this machine cannot hold fails before the work starts.
double host_bytes_needed(const MoeConfig& c, int64_t tokens, bool gpu, bool reference) {
  const double H = static_cast<double>(c.hidden);
  const double k = c.routing.top_k, E = c.num_experts;
  const double per_token = H * (4 + 2 + 2) + E * 4 * 2 + k * 8;
  const double experts = gpu ? E + 1 : std::min(E, static_cast<double>(tokens) * k) + 1;
  const double router = E * H * 4 + E * 4;  // fp32 router weight and correction bias
  return static_cast<double>(tokens) * per_token + experts * expert_weight_bytes(c.hidden, c.intermediate) +
         router + (reference ? moe_reference_host_bytes(c, tokens) : 0.0);
}

void run_layer(const RunArgs& a) {
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  const CudaEnvironment env = query_cuda_environment();
  FP4MOE_CHECK(!(a.device == "gpu" && env.devices.empty()), "--device gpu: no usable GPU (", env.error, ")");
  FP4MOE_CHECK(!(a.cuda.given && a.device == "cpu"), "--cuda-device picks a GPU; --device cpu runs none");
  // The GPU: --cuda-device's, which must exist where it is given; else device 0 where there is one.
  const GpuSpec* gpu = a.cuda.given || (!env.devices.empty() && a.device != "cpu")
                           ? &require_cuda_device(env, a.cuda, "run")
                           : nullptr;
  // A GPU this build has no machine code for (a Blackwell GPU with the default build): --device
  // gpu fails naming the run target to build; auto runs the CPU reference and says why.
  const BuildSupport support = gpu ? build_support_for(*gpu) : BuildSupport{};
  FP4MOE_CHECK(a.device != "gpu" || support.runs, "--device gpu: ", support.why);
  if (a.device == "auto" && !env.devices.empty() && !support.runs)
    std::fprintf(stderr, "fp4moe: note: %s; running the CPU reference instead\n", support.why.c_str());
  const bool use_gpu = a.device != "cpu" && support.runs;
  FP4MOE_CHECK(!a.compare || use_gpu, "--compare-reference compares the GPU output; there is no GPU run here");
  FP4MOE_CHECK(!a.iters_given || use_gpu, "--iters times the GPU's graph replays; there is no GPU run here");

  // ---- the layer: a checkpoint's, or seeded random weights of a preset shape ---------------
  MoeWeights w;
  const bool synthetic = a.checkpoint.empty();
  if (!synthetic) {
    const auto t0 = std::chrono::steady_clock::now();
    const Checkpoint ckpt = Checkpoint::open(a.checkpoint);
    const ModelInfo info = read_model_info(ckpt);
    w = load_moe_layer(ckpt, info, a.layer);
    std::printf("checkpoint %s (%s, %s): layer %d of %d loaded in %.2f s\n", a.checkpoint.c_str(),
                printable(info.model_type).c_str(), printable(info.quant_algo).c_str(), a.layer, info.num_layers,
                seconds_since(t0));
  } else {
    const MoeConfig shape = a.shape.resolve();
    // Before anything is generated (with --input, its own check follows once its T is known).
    require_host_memory(host_bytes_needed(shape, a.input.empty() ? a.tokens : 1, use_gpu, !use_gpu || a.compare),
                        "the " + shape.name + " layer" + (a.input.empty() ? " at --tokens " + std::to_string(a.tokens) : ""));
    SyntheticOptions so;
    so.seed = a.seed;
    so.threads = threads;
    so.materialize.assign(shape.num_experts, false);  // router first; experts below
    w = make_synthetic_moe(shape, so);
  }
  const MoeConfig& cfg = w.config;
  print_config(cfg);

  // ---- input: --input FILE.npy [T, H], or seeded N(0,1) bf16 values ------------------------
  int64_t tokens = a.tokens;
  std::vector<float> hidden;
  if (!a.input.empty()) {
    const NpyArray in = read_npy(a.input, [&](const NpyArray& head) {  // before its data is read
      FP4MOE_CHECK(head.shape.size() == 2 && head.shape[1] == cfg.hidden, a.input, ": expected shape (T, ",
                   cfg.hidden, "), got ", npy_shape_string(head.shape));
      FP4MOE_CHECK(head.shape[0] >= 1, a.input, ": the input holds no tokens");
      FP4MOE_CHECK(head.shape[0] <= kMaxTokens, a.input, ": ", head.shape[0], " tokens exceed the limit of ",
                   kMaxTokens);
      require_host_memory(host_bytes_needed(cfg, head.shape[0], use_gpu, !use_gpu || a.compare) +
                              static_cast<double>(head.elements()) * head.item_size(),
                          a.input + ": the run of its " + std::to_string(head.shape[0]) + " tokens");
    });
    tokens = in.shape[0];
    hidden = npy_to_float(in, a.input);
    for (size_t i = 0; i < hidden.size(); ++i) {
      const float v = hidden[i];
      hidden[i] = round_to_bf16(v);  // the layer's input is bf16
      // (a finite value past bf16's range rounds to infinity: named here, not as a router logit)
      FP4MOE_CHECK(std::isfinite(hidden[i]), a.input, ": element ", i, " (token ", i / cfg.hidden, ") is ", v,
                   std::isfinite(v) ? ", beyond bf16's range" : "");
    }
  } else {
    require_host_memory(host_bytes_needed(cfg, tokens, use_gpu, !use_gpu || a.compare),
                        "--tokens " + std::to_string(tokens) + ": the run");
    hidden = make_hidden_states(tokens, cfg.hidden, a.seed);
  }
  std::vector<float> logits = router_logits_reference(hidden, tokens, w);
  if (a.skew > 0) {
    const std::vector<float> bias = make_router_logits(1, cfg.num_experts, a.seed, a.skew);
    for (int64_t t = 0; t < tokens; ++t)
      for (int e = 0; e < cfg.num_experts; ++e) logits[t * cfg.num_experts + e] += bias[e];
  }
  const Routing routing = route_reference(cfg.routing, logits, tokens, cfg.num_experts, w.correction_bias);
  if (synthetic) {
    // CPU: only the routed experts (a GLM-5 layer holds 5.4 GB); GPU: all of them.
    SyntheticOptions so;
    so.seed = a.seed;
    so.threads = threads;
    so.router = false;
    so.materialize.assign(cfg.num_experts, use_gpu);
    for (int32_t e : routing.ids) so.materialize[e] = true;
    int n = 0;
    for (bool m : so.materialize) n += m;
    const auto t0 = std::chrono::steady_clock::now();
    MoeWeights ex = make_synthetic_moe(cfg, so);
    w.experts = std::move(ex.experts);
    w.shared = std::move(ex.shared);
    std::printf("weights: seeded random NVFP4 (seed %llu), %d of %d experts materialised (%s) in %.2f s\n",
                static_cast<unsigned long long>(a.seed), n, cfg.num_experts,
                byte_size(n * expert_weight_bytes(cfg.hidden, cfg.intermediate)).c_str(),
                seconds_since(t0));
  }
  std::printf("tokens %lld: %lld (token, expert) pairs on %d of %d experts%s\n", static_cast<long long>(tokens),
              static_cast<long long>(tokens * cfg.routing.top_k), count_distinct(routing.ids), cfg.num_experts,
              a.skew > 0 ? " (routing skewed: --skew biases the router's logits)" : "");

  std::vector<uint16_t> out;
  if (use_gpu) {
#ifdef FP4MOE_WITH_CUDA
    const auto t_up = std::chrono::steady_clock::now();
    LayerOptions lo;
    lo.device = gpu->device_index;
    std::unique_ptr<GpuMoeLayer> layer = GpuMoeLayer::create(w, lo);
    std::printf("uploaded and prepacked on %s (CUDA device %d) in %.2f s\n", gpu->name.c_str(), gpu->device_index,
                seconds_since(t_up));
    const GpuLayerRun run = run_gpu_layer(*layer, hidden, logits, tokens, a.iters);
    std::printf("gpu: %.1f us per layer (median of %d CUDA-graph replays, warm L2); tactics %s / %s\n",
                run.median_us, a.iters, format_tactic(run.plan.fc1).c_str(), format_tactic(run.plan.fc2).c_str());
    if (run.sm_clock.fc1_launches > 0)
      std::printf("gpu: SM clock in FC1 / FC2 %.0f / %.0f MHz (measured in the kernels: clock64 over %%globaltimer)\n",
                  run.sm_clock.fc1_ghz * 1e3, run.sm_clock.fc2_ghz * 1e3);
    print_output(run.out, tokens, cfg.hidden);
    out = run.out;
    if (a.compare) {
      const std::vector<double> ref = moe_reference(w, hidden, tokens, run.routing, ReferenceOptions{threads});
      const double rel = relative_error(run.out, ref);
      std::printf("vs float64 CPU reference (same routing): relative Frobenius error %.3e (limit 1e-2)\n", rel);
      FP4MOE_CHECK(rel < 1e-2, "GPU output differs from the reference by ", rel, " (relative Frobenius)");
    }
#endif
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<double> ref = moe_reference(w, hidden, tokens, routing, ReferenceOptions{threads});
    std::printf("cpu reference (float64, %d thread%s): %.3f s\n", threads, threads == 1 ? "" : "s", seconds_since(t0));
    out = to_bf16(ref);
    print_output(out, tokens, cfg.hidden);
  }
  if (!a.output.empty()) {
    if (a.output_dtype == "bf16") {
      write_npy(a.output, npy_from_bf16(out, {tokens, cfg.hidden}));
    } else {
      std::vector<float> f(out.size());
      for (size_t i = 0; i < out.size(); ++i) f[i] = Bf16::from_bits(out[i]).to_float();
      write_npy(a.output, npy_from_float(f, {tokens, cfg.hidden}));
    }
    std::printf("wrote %s (%s [%lld, %lld])\n", a.output.c_str(), a.output_dtype.c_str(),
                static_cast<long long>(tokens), static_cast<long long>(cfg.hidden));
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run one MoE layer (built-in GLM-5-shaped default)");
  args->shape.add_to(cmd);
  cmd->add_option("--tokens,-t", args->tokens, "Tokens in the batch")
      ->transform(IntegerIn(1, kMaxTokens));
  cmd->add_option("--seed", args->seed, "Seed of the synthetic weights and inputs")->transform(WholeNumber<uint64_t>());
  cmd->add_option("--threads", args->threads, "CPU threads (0: all)")->transform(IntegerIn(0, 4096));
  cmd->add_option("--skew", args->skew, "Routing skew: >0 favours a few experts")->check(FiniteRange(0.0, kMaxRoutingSkew));
  cmd->add_option("--device", args->device, "auto (GPU if present), gpu, or cpu (the float64 reference)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  args->cuda.add_to(cmd);
  cmd->add_flag("--compare-reference", args->compare, "Check the GPU output against the CPU reference");
  cmd->add_option("--checkpoint", args->checkpoint, "A ModelOpt NVFP4 checkpoint directory (instead of --preset)")
      ->check(NonEmptyPath);
  cmd->add_option("--layer", args->layer, "With --checkpoint: the MoE layer to run")
      ->transform(IntegerIn(0, 1 << 20))
      ->default_str("");  // (-1 inside: none given)
  cmd->add_option("--input", args->input, "Hidden states [T, H] (.npy: f32, f16, f64 or bf16 as <V2); sets T")
      ->check(NonEmptyPath);
  cmd->add_option("--output", args->output, "Write the output [T, H] (.npy)")->check(NonEmptyPath);
  cmd->add_option("--output-dtype", args->output_dtype, "f32 or bf16 (<V2, as ml_dtypes.bfloat16 saves)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--iters", args->iters, "GPU: timed CUDA-graph replays (median)")->transform(IntegerIn(1, 100000));
  // What a checkpoint or an input file fixes cannot also be given: it was silently ignored.
  for (const char* shape : {"--preset", "--hidden", "--intermediate", "--shared-intermediate", "--experts", "--top-k",
                            "--n-group", "--topk-group", "--routing"})
    cmd->get_option("--checkpoint")->excludes(cmd->get_option(shape));
  cmd->get_option("--input")->excludes(cmd->get_option("--tokens"));
  // A checkpoint's router is the model's: a synthetic skew on its logits would change the
  // output it is run for, silently.
  cmd->get_option("--checkpoint")->excludes(cmd->get_option("--skew"));
  cmd->get_option("--output-dtype")->needs(cmd->get_option("--output"));
  cmd->callback([args, cmd] {
    args->iters_given = cmd->count("--iters") > 0;
    FP4MOE_CHECK(!(cmd->count("--seed") > 0 && !args->checkpoint.empty() && !args->input.empty()),
                 "--seed: nothing is generated with --checkpoint and --input (the weights and the input are the files')");
    require_writable_path(args->output, "--output");
    require_not_same_file(args->input, args->output, "--output");  // (passes where either is not given)
    // (a missing input is named before a checkpoint's gigabytes are read)
    if (!args->input.empty()) require_regular_file(args->input);
    FP4MOE_CHECK(args->checkpoint.empty() == (args->layer < 0),
                 args->checkpoint.empty() ? "--layer needs --checkpoint" : "--checkpoint needs --layer N");
    run_layer(*args);
  });
}

}  // namespace fp4moe::cli
