// Whether machine code runs on the GPU: the runtime's answer (build_support_for, and the same
// question of a kernel built for sm_80 alone and one built for sm_90a alone) against CUDA's rules
// (run_target_runs_on). On an H200 the sm_80 kernel has no image there and the sm_90a one runs;
// on an sm_8x GPU the other way round; on Blackwell neither.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fp4moe/hw.h"
#include "fp4moe/version.h"
#include "hw/kernel_image.h"
#include "gpu_test_util.h"

namespace fp4moe::test {
const void* arch_probe_80();  // tests/gpu/arch_probe_kernel.cu, once per architecture
const void* arch_probe_90a();
}  // namespace fp4moe::test

namespace fp4moe {
namespace {

TEST(BuildSupport, TheRuntimeAgreesWithTheRulesForMachineCodeOfOneArchitecture) {
  const CudaEnvironment env = query_cuda_environment();
  FP4MOE_REQUIRE_GPU_PRESENT();
  for (const GpuSpec& g : env.devices) {
    const std::pair<const char*, const void*> probes[] = {{"80", test::arch_probe_80()},
                                                          {"90a", test::arch_probe_90a()}};
    for (const auto& [target, kernel] : probes) {
      const BuildSupport s = detail::kernel_image_support(kernel, g, target);
      EXPECT_EQ(s.runs, run_target_runs_on(target, g.sm)) << target << " on " << g.name << " (" << g.arch_name() << ")";
      if (s.runs) {
        EXPECT_EQ(s.machine_code_sm, std::stoi(target)) << target;
        EXPECT_EQ(s.code_sm, std::stoi(target)) << target << ": machine code compiled from its own PTX";
        EXPECT_TRUE(s.why.empty());
      } else {
        EXPECT_EQ(s.machine_code_sm, 0);
        // Names the GPU, the targets it was built for and the one to build.
        EXPECT_NE(s.why.find(g.name), std::string::npos) << s.why;
        EXPECT_NE(s.why.find(std::string("run targets ") + target + ")"), std::string::npos) << s.why;
        EXPECT_NE(s.why.find("-DFP4MOE_CUDA_ARCHS=" + run_target_for(g.sm)), std::string::npos) << s.why;
      }
    }
  }
}

// The library's own answer: it runs on a GPU exactly where one of its run targets does by the
// rules, on machine code of the GPU's major version compiled from one of the targets' code; the
// layer plans for that code's architecture where it is an earlier major version's PTX.
TEST(BuildSupport, TheLibraryRunsWhereOneOfItsRunTargetsDoes) {
  const CudaEnvironment env = query_cuda_environment();
  FP4MOE_REQUIRE_GPU_PRESENT();
  for (const GpuSpec& g : env.devices) {
    bool by_rules = false;
    std::vector<int> archs;  // the targets' architectures: "90a" 90, "80-virtual" 80
    std::istringstream targets(FP4MOE_CUDA_ARCHS);
    for (std::string t; std::getline(targets, t, ';');) {
      by_rules = by_rules || run_target_runs_on(t, g.sm);
      archs.push_back(std::stoi(t));
    }
    const BuildSupport s = build_support_for(g);
    EXPECT_EQ(s.runs, by_rules) << FP4MOE_CUDA_ARCHS << " on " << g.arch_name() << ": " << s.why;
    const GpuSpec planned = gpu_for_build(g);
    if (s.runs) {
      EXPECT_EQ(s.machine_code_sm / 10, g.sm / 10) << "machine code of another major version";
      EXPECT_LE(s.machine_code_sm, g.sm);
      EXPECT_NE(std::find(archs.begin(), archs.end(), s.code_sm), archs.end()) << "code of sm_" << s.code_sm;
      EXPECT_EQ(planned.sm, s.code_sm / 10 < g.sm / 10 ? s.code_sm : g.sm);
    } else {
      EXPECT_EQ(planned.sm, g.sm);
    }
  }
}

}  // namespace
}  // namespace fp4moe
