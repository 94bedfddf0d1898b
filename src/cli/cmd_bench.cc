// fp4moe bench: the roofline benchmark. With a GPU: ceilings, baseline and our layer measured
// in one process, a table per token count and per-stage times. Without one: the byte/FLOP
// accounting and floors for a table GPU, and the CPU reference timed at small batches.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "bench/roofline.h"
#include "cli/commands.h"
#include "cli/cuda_device.h"
#include "cli/printable.h"
#include "cli/shape_options.h"
#include "cli/validators.h"
#include "common/host_memory.h"
#include "common/median.h"
#include "fp4moe/build_id.h"
#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/sharding.h"
#include "fp4moe/synthetic.h"
#include "fp4moe/tactic.h"
#include "fp4moe/version.h"
#include "io/text_file.h"

#ifdef FP4MOE_WITH_CUDA
#include "bench/bench_runner.h"
#endif
#ifdef FP4MOE_WITH_NCCL
#include "bench/dist_bench.h"
#endif

namespace fp4moe::cli {
namespace {

struct BenchArgs {
  ShapeArgs shape;
  std::string tokens;  // comma list; empty = 1, 2, 4, ..., 16384
  uint64_t seed = 1;
  double skew = 0;
  bool warm_l2 = false, no_graph = false, no_baseline = false;
  int iters = 30, warmup = 5;
  double warmup_ms = 0;
  std::string json;
  std::string gpu = "h200";  // accounting GPU when none is present
  int64_t cpu_max_tokens = 4;
  std::string fc1, fc2;  // tactic overrides
  bool no_cache = false;
  double sustain_seconds = 3;
  int tp = 0;  // > 1: the tensor-parallel benchmark over this many GPUs
  int ep = 0;  // > 1: the expert-parallel one
  CudaDeviceArg cuda;  // the one GPU of a single-GPU run
  // Options given that only one kind of run uses, refused by the other (an option that would be
  // ignored silently reads as applied): what times the GPU, and what stands in for a GPU.
  std::vector<std::string> gpu_run_options_given, no_gpu_options_given;
};

// The sweep: the given token counts, or 1, 2, 4, ..., 16384.
std::vector<int64_t> parse_tokens(const std::string& s) {
  if (!s.empty()) return parse_token_list(s);
  std::vector<int64_t> v;
  for (int64_t t = 1; t <= 16384; t *= 2) v.push_back(t);
  return v;
}

nlohmann::json config_json(const MoeConfig& c) {
  return {{"name", c.name},
          {"hidden", c.hidden},
          {"intermediate", c.intermediate},
          {"experts", c.num_experts},
          {"top_k", c.routing.top_k},
          {"routing", to_string(c.routing.mode)},
          {"n_group", c.routing.n_group},
          {"topk_group", c.routing.topk_group},
          {"shared_intermediate", c.shared_intermediate}};
}

nlohmann::json gpu_json(const GpuSpec& g) {
  return {{"name", g.name}, {"sm", g.sm}, {"sms", g.sm_count}, {"l2_bytes", g.l2_bytes},
          {"smem_per_block", g.smem_per_block_optin}, {"live", g.live}, {"cuda_device", g.device_index}};
}

nlohmann::json cost_json(const LayerCost& c, const Roofline& f) {
  return {{"active_experts", c.active_experts}, {"weight_bytes", c.weight_bytes},
          {"activation_bytes", c.activation_bytes}, {"bytes", c.bytes}, {"flops", c.flops},
          {"intensity", f.intensity}, {"floor_us", f.floor_s * 1e6},
          {"memory_us", f.memory_s * 1e6}, {"compute_us", f.compute_s * 1e6},
          {"bound", f.memory_bound ? "memory" : "compute"}};
}

void write_json(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, j.dump(2) + "\n");  // checked after the close: a full disk shows only then
  std::printf("wrote %s\n", path.c_str());
}

void print_header(const MoeConfig& cfg, const GpuSpec& g, double bw, double tf, const char* src) {
  std::printf("fp4moe %s bench: %s (H %lld, I %lld, E %d, top-%d, shared I %lld) on %s (sm_%d, %d SMs)\n",
              FP4MOE_VERSION, cfg.name.c_str(), static_cast<long long>(cfg.hidden),
              static_cast<long long>(cfg.intermediate), cfg.num_experts, cfg.routing.top_k,
              static_cast<long long>(cfg.shared_intermediate), g.name.c_str(), g.sm, g.sm_count);
  std::printf("ceilings (%s): read bandwidth %.0f GB/s, BF16 tensor %.1f TFLOPS; ridge %.0f FLOP/B\n",
              src, bw / 1e9, tf / 1e12, tf / bw);
}

#ifdef FP4MOE_WITH_CUDA
nlohmann::json clock_json(const ClockSample& c) {
  return {{"sm_mhz_mean", c.sm_mhz_mean}, {"sm_mhz_min", c.sm_mhz_min}, {"sm_mhz_max", c.sm_mhz_max},
          {"power_w_max", c.power_w_max}, {"reasons", describe_clock_reasons(c.reasons)},
          {"samples", c.samples}};
}

// "1650 MHz (1590-1980, sw power cap)"
std::string clock_text(const std::optional<ClockSample>& c) {
  if (!c) return "n/a";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.0f MHz (%u-%u, %s)", c->sm_mhz_mean, c->sm_mhz_min, c->sm_mhz_max,
                describe_clock_reasons(c->reasons).c_str());
  return buf;
}

void run_gpu(const BenchArgs& a, const MoeConfig& cfg) {
  BenchOptions o;
  o.config = cfg;
  o.tokens = parse_tokens(a.tokens);
  o.seed = a.seed;
  o.skew = a.skew;
  o.cold_l2 = !a.warm_l2;
  o.graph = !a.no_graph;
  o.baseline = !a.no_baseline;
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.warmup_seconds = a.warmup_ms * 1e-3;
  o.use_tuning_cache = !a.no_cache;
  o.sustain_seconds = a.sustain_seconds;
  o.device = a.cuda.index;
  if (!a.fc1.empty()) o.fc1 = parse_tactic(a.fc1);
  if (!a.fc2.empty()) o.fc2 = parse_tactic(a.fc2);
  const bool tty = isatty(fileno(stderr));
  o.progress = [tty](const std::string& s) {
    if (tty) std::fprintf(stderr, "\r\033[K%s", printable(s).c_str());  // (it carries the cache's warnings)
    else std::fprintf(stderr, "%s\n", printable(s).c_str());
  };
  const BenchReport r = run_bench(o);
  if (tty) std::fprintf(stderr, "\r\033[K");
  print_header(cfg, r.gpu, r.ceilings.read_bytes_per_s, r.ceilings.bf16_flops, "measured");
  if (r.ceilings.bf16_clock)
    std::printf("SM clock (NVML, mean over each timed loop; min-max, what lowered it): BF16 ceiling %s, "
                "power up to %.0f W (NVML's 1 s average: a short burst reads low)\n",
                clock_text(r.ceilings.bf16_clock).c_str(), r.ceilings.bf16_clock->power_w_max);
  else
    std::printf("SM clock: not sampled (%s)\n", r.clock_monitor_unavailable.empty()
                                                   ? "no samples" : r.clock_monitor_unavailable.c_str());
  const double sustained = r.ceilings.bf16_flops_sustained;
  if (sustained > 0)
    std::printf("BF16 tensor sustained: %.1f TFLOPS (%.0f%% of the burst) after %.0f s of the same GEMM, SM clock %s; "
                "\"%%sust\" below: a layer's TFLOPS against it\n",
                sustained / 1e12, 100.0 * sustained / r.ceilings.bf16_flops, r.ceilings.sustain_seconds,
                clock_text(r.ceilings.bf16_sustained_clock).c_str());
  const std::string warm_for =
      o.warmup_seconds > 0 ? " over " + std::to_string(std::lround(o.warmup_seconds * 1e3)) + " ms or more" : "";
  std::printf("timing: median of %d %s after %d warm-up%s, %s L2; baseline: cuBLAS BF16 (routing prepared on the "
              "host, not timed)\n\n",
              o.iters, o.graph ? "CUDA-graph replays" : "launches", o.warmup, warm_for.c_str(),
              o.cold_l2 ? "cold" : "warm");
  if (!o.cold_l2)
    std::printf("warm L2: the floor counts every byte from DRAM; a row whose bytes fit in the %.0f MB L2 can run "
                "below it\n\n", r.gpu.l2_bytes / 1e6);
  std::printf("%6s %4s %9s %9s %7s %4s %9s | %9s %7s %7s %6s %6s | %9s %7s %6s | %s\n", "T", "act",
              "MB", "GFLOP", "FLOP/B", "bnd", "floor us", "ours us", "GB/s", "TFLOPS", "%floor",
              "xfloor", "cuBLAS us", "%floor", "speed", "tactics (fc1 / fc2)");
  nlohmann::json rows = nlohmann::json::array();
  for (const BenchRow& w : r.rows) {
    // The baseline's cells, or dashes where it was not run (--no-baseline).
    char base[48] = "        -       -      -";
    if (w.has_baseline)
      std::snprintf(base, sizeof base, "%9.1f %7.1f %5.2fx", w.baseline.median_us, w.baseline.pct_floor, w.speedup);
    std::printf("%6lld %4d %9.1f %9.2f %7.1f %4s %9.1f | %9.1f %7.0f %7.1f %6.1f %6.2f | %s | %s / %s\n",
                static_cast<long long>(w.tokens), w.cost.active_experts, w.cost.bytes / 1e6,
                w.cost.flops / 1e9, w.floor.intensity, w.floor.memory_bound ? "mem" : "tc",
                w.floor.floor_s * 1e6, w.ours.median_us, w.ours.gbs, w.ours.tflops, w.ours.pct_floor,
                w.ours.x_floor, base, w.fc1_tactic.c_str(), w.fc2_tactic.c_str());
    // The fused family is one launch: routing, both GEMMs and the slot sums are its phases, not
    // stages with events between them (its time is the FC1 stage's; the others are empty).
    if (w.fc1_tactic.rfind("w4a16_fused", 0) == 0)
      std::printf("%6s   stages: one launch (routing, FC1, FC2, slot sums) %.1f us; plan: %s", "", w.fc1_us,
                  w.plan_source.c_str());
    else if (w.fc1_tactic.rfind("w4a16_gemv", 0) == 0)  // (its routing is FC1's prologue)
      std::printf("%6s   stages: FC1 with the routing %.1f us, FC2 %.1f us; plan: %s", "", w.fc1_us, w.fc2_us,
                  w.plan_source.c_str());
    else
      std::printf("%6s   stages: routing+permute %.1f us, FC1 %.1f us, FC2 %.1f us; plan: %s", "", w.routing_us,
                  w.fc1_us, w.fc2_us, w.plan_source.c_str());
    if (w.has_baseline) std::printf("; ours vs cuBLAS rel err %.2e", w.rel_error_vs_baseline);
    std::printf("\n");
    // What this many bytes cost a kernel that only reads them (launch, ramp, tail included).
    if (w.plain_read_us > 0)
      std::printf("%6s   plain read of the same %.1f MB, timed the same way: %.1f us (%.0f GB/s, %.2fx the floor); "
                  "ours %.2fx it\n", "", w.cost.bytes / 1e6, w.plain_read_us, w.cost.bytes / w.plain_read_us / 1e3,
                  w.plain_read_us * 1e-6 / w.floor.floor_s, w.ours.median_us / w.plain_read_us);
    else if (!w.plain_read_skipped.empty())
      std::printf("%6s   plain read of the same bytes: not timed (%s)\n", "", w.plain_read_skipped.c_str());
    const SmClockAccount& m = w.ours_sm_clock;
    if (w.ours_clock || m.fc1_launches > 0) {
      // NVML's sampled clock, then the one our GEMMs measured themselves (under the power cap
      // the two differ: NVML can read the boost clock while the SMs run 20% below it).
      std::printf("%6s   SM clock: ours %s", "", clock_text(w.ours_clock).c_str());
      if (m.fc1_launches > 0)
        std::printf(", in its GEMMs %.0f / %.0f MHz (FC1 / FC2, clock64 over %%globaltimer)", m.fc1_ghz * 1e3,
                    m.fc2_ghz * 1e3);
      if (w.has_baseline) std::printf(", cuBLAS %s", clock_text(w.baseline_clock).c_str());
      std::printf("\n");
    }
    // A layer's TFLOPS as a share of the sustained BF16 rate (printed, and kept in the JSON).
    const double ours_pct_sust = sustained > 0 ? 100.0 * w.ours.tflops * 1e12 / sustained : 0;
    const double base_pct_sust = sustained > 0 ? 100.0 * w.baseline.tflops * 1e12 / sustained : 0;
    if (sustained > 0 && !w.floor.memory_bound) {
      std::printf("%6s   %%sust: ours %.1f%%", "", ours_pct_sust);
      if (w.has_baseline) std::printf(", cuBLAS %.1f%%", base_pct_sust);
      std::printf(" of the sustained BF16 rate\n");
    }
    nlohmann::json j = {{"tokens", w.tokens},
                        {"cost", cost_json(w.cost, w.floor)},
                        {"ours", {{"median_us", w.ours.median_us}, {"gbs", w.ours.gbs},
                                  {"tflops", w.ours.tflops}, {"pct_floor", w.ours.pct_floor},
                                  {"x_floor", w.ours.x_floor}, {"path", "gpu"},
                                  {"fc1_tactic", w.fc1_tactic}, {"fc2_tactic", w.fc2_tactic},
                                  {"plan", w.plan_source},
                                  {"stages_us", {{"routing", w.routing_us}, {"fc1", w.fc1_us}, {"fc2", w.fc2_us}}}}}};
    if (w.ours_clock) j["ours"]["clock"] = clock_json(*w.ours_clock);
    if (w.plain_read_us > 0)
      j["plain_read"] = {{"median_us", w.plain_read_us}, {"gbs", w.cost.bytes / w.plain_read_us / 1e3},
                         {"x_floor", w.plain_read_us * 1e-6 / w.floor.floor_s},
                         {"ours_x", w.ours.median_us / w.plain_read_us}};
    else if (!w.plain_read_skipped.empty())
      j["plain_read"] = {{"skipped", w.plain_read_skipped}};
    if (m.fc1_launches > 0)
      j["ours"]["sm_clock_measured"] = {{"fc1_mhz", m.fc1_ghz * 1e3}, {"fc2_mhz", m.fc2_ghz * 1e3},
                                        {"fc1_launches", m.fc1_launches}, {"fc2_launches", m.fc2_launches}};
    if (sustained > 0) j["ours"]["pct_sustained_bf16"] = ours_pct_sust;
    if (w.has_baseline) {
      // gbs over its own bytes (BF16 weights); pct_floor and x_floor against our (NVFP4) floor.
      j["baseline"] = {{"median_us", w.baseline.median_us}, {"bytes", w.baseline_cost.bytes}, {"gbs", w.baseline.gbs},
                       {"tflops", w.baseline.tflops}, {"pct_floor", w.baseline.pct_floor},
                       {"x_floor", w.baseline.x_floor}, {"method", w.baseline_method},
                       {"speedup", w.speedup}, {"rel_error", w.rel_error_vs_baseline},
                       {"timing", "plain launches, the routing prepared on the host and not timed"}};
      if (w.baseline_clock) j["baseline"]["clock"] = clock_json(*w.baseline_clock);
      if (sustained > 0) j["baseline"]["pct_sustained_bf16"] = base_pct_sust;
    }
    rows.push_back(j);
  }
  nlohmann::json ceilings = {{"read_gbs", r.ceilings.read_bytes_per_s / 1e9},
                             {"bf16_tflops", r.ceilings.bf16_flops / 1e12},
                             {"source", "measured"}};
  if (r.ceilings.bf16_clock) ceilings["bf16_clock"] = clock_json(*r.ceilings.bf16_clock);
  if (sustained > 0) {
    ceilings["bf16_sustained_tflops"] = sustained / 1e12;
    ceilings["bf16_sustain_seconds"] = r.ceilings.sustain_seconds;
    if (r.ceilings.bf16_sustained_clock) ceilings["bf16_sustained_clock"] = clock_json(*r.ceilings.bf16_sustained_clock);
  }
  if (!a.json.empty())
    write_json(a.json, {{"schema", "fp4moe-bench/1"}, {"version", FP4MOE_VERSION}, {"build", build_id()},
                        {"gpu", gpu_json(r.gpu)}, {"config", config_json(cfg)},
                        {"ceilings", ceilings},
                        {"options", {{"seed", o.seed}, {"skew", o.skew}, {"cold_l2", o.cold_l2},
                                     {"graph", o.graph}, {"iters", o.iters}, {"warmup", o.warmup},
                                     {"warmup_ms", o.warmup_seconds * 1e3}}},
                        {"rows", rows}});
}
#endif

// No GPU: the accounting for a table GPU, and the CPU reference's time at small batches.
constexpr int kCpuTimedRuns = 3;

void run_cpu(const BenchArgs& a, const MoeConfig& cfg, const std::string& why) {
  if (!a.gpu_run_options_given.empty())
    FP4MOE_FAIL("bench: ", a.gpu_run_options_given.front(), " applies to a GPU run; there is no GPU here (", why,
                "): the bench gives the datasheet accounting and times the CPU reference");
  const GpuSpec g = resolve_gpu(a.gpu);
  const double bw = g.mem_bandwidth_gbs * 1e9, tf = g.bf16_tflops * 1e12;
  FP4MOE_CHECK(bw > 0 && tf > 0, "bench: the table has no bandwidth/BF16 peak for ", g.name);
  std::printf("no GPU (%s): accounting for %s from its datasheet; our path is the CPU reference\n", why.c_str(),
              g.name.c_str());
  print_header(cfg, g, bw, tf, "datasheet");
  std::printf("\n%6s %4s %9s %9s %7s %4s %9s | %12s\n", "T", "act", "MB", "GFLOP", "FLOP/B", "bnd",
              "floor us", "cpu ref ms *");
  nlohmann::json rows = nlohmann::json::array();
  SyntheticOptions so;
  so.seed = a.seed;
  so.materialize.assign(cfg.num_experts, false);
  MoeWeights w = make_synthetic_moe(cfg, so);
  for (int64_t T : parse_tokens(a.tokens)) {
    require_host_memory(static_cast<double>(T) * (cfg.num_experts * 4.0 + cfg.routing.top_k * 8.0),  // logits, routing
                        "the routing of T = " + std::to_string(T));
    std::vector<float> logits = make_router_logits(T, cfg.num_experts, a.seed + T);
    if (a.skew > 0) {
      const std::vector<float> b = make_router_logits(1, cfg.num_experts, a.seed + 99, a.skew);
      for (int64_t t = 0; t < T; ++t)
        for (int e = 0; e < cfg.num_experts; ++e) logits[t * cfg.num_experts + e] += b[e];
    }
    const Routing r = route_reference(cfg.routing, logits, T, cfg.num_experts, w.correction_bias);
    const LayerCost c = layer_cost(cfg, T, count_active_experts(r.ids, cfg.num_experts));
    const Roofline f = roofline(c, bw, tf);
    double cpu_ms = NAN;
    if (T <= a.cpu_max_tokens) {
      require_host_memory(moe_reference_host_bytes(cfg, T) + T * cfg.hidden * 4.0,
                          "the CPU reference at T = " + std::to_string(T) + " (--cpu-max-tokens)");
      SyntheticOptions eo = so;
      eo.router = false;
      eo.materialize.assign(cfg.num_experts, false);
      for (int32_t e : r.ids) eo.materialize[e] = true;
      MoeWeights ew = make_synthetic_moe(cfg, eo);
      ew.router_weight = w.router_weight;
      ew.correction_bias = w.correction_bias;
      const std::vector<float> hidden = make_hidden_states(T, cfg.hidden, a.seed + T);
      // One untimed run (the first touches the weights' pages and the threads' stacks: ~10x the
      // next at small T), then the median of kCpuTimedRuns.
      moe_reference(ew, hidden, T, r);
      std::vector<double> ms;
      for (int i = 0; i < kCpuTimedRuns; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        moe_reference(ew, hidden, T, r);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      cpu_ms = median(ms);
    }
    char cpu_cell[32] = "-";  // not timed: above --cpu-max-tokens
    if (std::isfinite(cpu_ms)) std::snprintf(cpu_cell, sizeof cpu_cell, "%.1f", cpu_ms);
    std::printf("%6lld %4d %9.1f %9.2f %7.1f %4s %9.1f | %12s\n", static_cast<long long>(T),
                c.active_experts, c.bytes / 1e6, c.flops / 1e9, f.intensity,
                f.memory_bound ? "mem" : "tc", f.floor_s * 1e6, cpu_cell);
    nlohmann::json j = {{"tokens", T}, {"cost", cost_json(c, f)}};
    if (std::isfinite(cpu_ms)) j["ours"] = {{"median_us", cpu_ms * 1e3}, {"path", "cpu_reference"}};
    rows.push_back(j);
  }
  std::printf("* the float64 CPU reference: the median of %d runs after an untimed one\n", kCpuTimedRuns);
  if (!a.json.empty())
    write_json(a.json, {{"schema", "fp4moe-bench/1"}, {"version", FP4MOE_VERSION}, {"build", build_id()},
                        {"gpu", gpu_json(g)}, {"config", config_json(cfg)},
                        {"ceilings", {{"read_gbs", bw / 1e9}, {"bf16_tflops", tf / 1e12}, {"source", "datasheet"}}},
                        {"options", {{"seed", a.seed}, {"skew", a.skew}}},
                        {"rows", rows}});
}

// --tp P / --ep P: one process per GPU (forked before this process touches CUDA), NCCL between.
void run_dist_command(const BenchArgs& a, const MoeConfig& cfg) {
  FP4MOE_CHECK(a.tp == 0 || a.ep == 0, "--tp and --ep: choose one");
  const char* flag = a.tp ? "--tp" : "--ep";
  FP4MOE_CHECK(a.fc1.empty() && a.fc2.empty() && a.json.empty() && a.skew == 0, flag,
               " takes the heuristic plan, uniform routing and prints a table: drop --fc1/--fc2/--json/--skew");
  const ShardMode mode = a.tp ? ShardMode::kTensor : ShardMode::kExpert;
  const int world = a.tp ? a.tp : a.ep;
  // A split the shape refuses is the user's error in any build: named before the build's lack
  // of CUDA/NCCL (and before any GPU or NCCL is looked for where the build has them).
  validate_shard(cfg, {mode, 0, world});
  // Every rank builds the whole layer's weights in host memory, then its shard's (the whole
  // layer's upload for the comparison on one GPU follows): P + 1 layers at the peak, all ranks
  // at once. Too many for the host is said here, not by the out-of-memory killer halfway.
  const double layer_bytes =
      cfg.num_experts * expert_weight_bytes(cfg.hidden, cfg.intermediate) +
      (cfg.has_shared_expert() ? expert_weight_bytes(cfg.hidden, cfg.shared_intermediate) : 0.0) +
      static_cast<double>(cfg.num_experts) * cfg.hidden * 4;
  require_host_memory((world + 1) * layer_bytes, std::string(flag) + " " + std::to_string(world) + " on " + cfg.name +
                                                     " (each rank builds the whole layer's weights)");
#ifdef FP4MOE_WITH_NCCL
  DistBenchOptions o;
  o.config = cfg;
  o.mode = mode;
  o.world = world;
  o.tokens = parse_tokens(a.tokens);
  o.seed = a.seed;
  o.warmup = a.warmup;
  o.iters = a.iters;
  o.cold_l2 = !a.warm_l2;
  FP4MOE_CHECK(run_dist_bench(o) == 0, flag, " ", o.world, ": a rank failed (its message is above)");
#else
  (void)cfg;
  FP4MOE_FAIL(flag, ": this build has no CUDA/NCCL (configure with CUDA and nccl.h present)");
#endif
}

void run_bench_command(const BenchArgs& a) {
  const MoeConfig cfg = a.shape.resolve();
  parse_tokens(a.tokens);  // validate before any work
  require_writable_path(a.json, "--json");
  // (only a GPU run uses them: a typo, or the other GEMM's epilogue, is still one)
  if (!a.fc1.empty())
    FP4MOE_CHECK(parse_tactic(a.fc1).epilogue == Epilogue::kSwiglu, "--fc1 ", a.fc1, ": FC1's epilogue is swiglu");
  if (!a.fc2.empty())
    FP4MOE_CHECK(parse_tactic(a.fc2).epilogue == Epilogue::kFinalize, "--fc2 ", a.fc2, ": FC2's epilogue is finalize");
  if (!a.no_gpu_options_given.empty() && (a.tp != 0 || a.ep != 0))
    FP4MOE_FAIL(a.tp ? "--tp" : "--ep", " measures GPUs: ", a.no_gpu_options_given.front(),
                " is for a machine without one");
  FP4MOE_CHECK(!a.cuda.given || (a.tp == 0 && a.ep == 0), "--cuda-device picks one GPU; ", a.tp ? "--tp" : "--ep",
               " runs on CUDA devices 0 to N-1 (choose them with CUDA_VISIBLE_DEVICES)");
  if (a.tp != 0 || a.ep != 0) {
    run_dist_command(a, cfg);
    return;
  }
  const CudaEnvironment env = query_cuda_environment();
  // Without a GPU the bench runs the CPU reference; a GPU asked for by number must exist.
  if (a.cuda.given) require_cuda_device(env, a.cuda, "bench");
#ifdef FP4MOE_WITH_CUDA
  if (!env.devices.empty()) {
    if (!a.no_gpu_options_given.empty())
      FP4MOE_FAIL("bench: ", a.no_gpu_options_given.front(),
                  " is for a machine without a GPU; this one's GPU is measured (--cuda-device N picks another)");
    run_gpu(a, cfg);
    return;
  }
#endif
  run_cpu(a, cfg, env.error);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Roofline benchmark: ceilings, cuBLAS baseline, our layer");
  a->shape.add_to(cmd);
  cmd->add_option("--tokens", a->tokens, "Comma-separated token counts (default 1,2,4,...,16384)")
      ->check(TokenList());
  cmd->add_option("--seed", a->seed, "Seed of weights, inputs and router")->transform(WholeNumber<uint64_t>());
  cmd->add_option("--skew", a->skew, "Routing skew (0: uniform; 2: a few experts take most tokens)")
      ->check(FiniteRange(0.0, kMaxRoutingSkew));
  cmd->add_flag("--warm-l2", a->warm_l2, "Do not flush the L2 before each timed run");
  cmd->add_flag("--no-graph", a->no_graph, "Time plain launches instead of CUDA-graph replays");
  cmd->add_flag("--no-baseline", a->no_baseline, "Skip the cuBLAS BF16 baseline");
  cmd->add_option("--iters", a->iters, "Timed runs per measurement (median)")->transform(IntegerIn(1, 100000));
  cmd->add_option("--warmup", a->warmup, "Untimed runs first")->transform(IntegerIn(0, 100000));
  cmd->add_option("--warmup-ms", a->warmup_ms, "Untimed runs for at least this long too: 50-100 ms puts the decode sizes under the power cap, as a long run does")
      ->check(FiniteRange(0.0, 60000.0));
  cmd->add_option("--json", a->json, "Write the results as JSON (schema fp4moe-bench/1)")->check(NonEmptyPath);
  cmd->add_option("--gpu", a->gpu, "Without a GPU: the table GPU whose datasheet gives the floors");
  a->cuda.add_to(cmd);
  cmd->add_option("--fc1", a->fc1, "Fixed FC1 tactic (e.g. w4a16_mma:m128n8k256:s4:w8:sk1:swiglu)");
  cmd->add_option("--fc2", a->fc2, "Fixed FC2 tactic (epilogue finalize)");
  cmd->add_flag("--no-cache", a->no_cache, "Ignore the tuning cache: the heuristic plan only");
  cmd->add_option("--sustain-seconds", a->sustain_seconds,
                  "Seconds of back-to-back BF16 GEMMs before the sustained (power-capped) ceiling is timed; 0: skip it")
      ->check(FiniteRange(0.0, 60.0));
  cmd->add_option("--cpu-max-tokens", a->cpu_max_tokens, "Without a GPU: time the CPU reference up to this T (0: none)")
      ->transform(IntegerIn(0, kMaxTokens));
  cmd->add_option("--tp", a->tp, "Tensor parallel over this many GPUs (one process each, NCCL): GEMMs vs all-reduce")
      ->transform(IntegerIn(2, 64))
      ->default_str("");  // (0 inside: one GPU; not a value --tp takes)
  cmd->add_option("--ep", a->ep, "Expert parallel over this many GPUs (one process each, NCCL): GEMMs vs dispatch/return")
      ->transform(IntegerIn(2, 64))
      ->default_str("");
  cmd->callback([a, cmd] {
    a->gpu_run_options_given.clear();
    a->no_gpu_options_given.clear();
    for (const char* o : {"--fc1", "--fc2", "--iters", "--warmup", "--warmup-ms", "--no-graph", "--warm-l2", "--no-cache",
                          "--no-baseline", "--sustain-seconds"})
      if (cmd->count(o) > 0) a->gpu_run_options_given.emplace_back(o);
    for (const char* o : {"--gpu", "--cpu-max-tokens"})
      if (cmd->count(o) > 0) a->no_gpu_options_given.emplace_back(o);
    run_bench_command(*a);
  });
}

}  // namespace fp4moe::cli
