// The clock monitor on a real GPU: NVML sampled while a kernel keeps the GPU busy.
#include <gtest/gtest.h>

#include "bench/clock_monitor.h"
#include "gpu_test_util.h"

namespace fp4moe {
namespace {

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

TEST(ClockMonitorOnGpu, SamplesTheClockWhileAKernelRuns) {
  FP4MOE_REQUIRE_GPU();
  char pci[32] = {};
  FP4MOE_CUDA_CHECK(cudaDeviceGetPCIBusId(pci, sizeof(pci), 0));
  ClockMonitor m(pci);
  if (!m.available()) GTEST_SKIP() << m.why_unavailable();
  m.start();
  spin<<<1, 32>>>(100'000'000);  // ~50-70 ms at 1.4-2 GHz
  FP4MOE_CUDA_CHECK_LAUNCH();
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::optional<ClockSample> s = m.stop();
  ASSERT_TRUE(s.has_value());
  EXPECT_GE(s->samples, 10);
  EXPECT_GT(s->sm_mhz_min, 100u);
  EXPECT_LE(s->sm_mhz_min, s->sm_mhz_mean);
  EXPECT_LE(s->sm_mhz_mean, s->sm_mhz_max);
  EXPECT_GT(s->power_w_max, 0.0);
  EXPECT_FALSE(m.stop().has_value());  // stopped once
}

}  // namespace
}  // namespace fp4moe
