#include "bench/clock_monitor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace fp4moe {
namespace {

TEST(ClockReasons, NamesTheBitsThatLowerTheClock) {
  EXPECT_EQ(describe_clock_reasons(0), "none");
  EXPECT_EQ(describe_clock_reasons(0x1), "none");  // idle: not a slowdown of a loaded GPU
  EXPECT_EQ(describe_clock_reasons(0x4), "sw power cap");
  EXPECT_EQ(describe_clock_reasons(0x4 | 0x40 | 0x1), "sw power cap, hw thermal slowdown");
  EXPECT_EQ(describe_clock_reasons(0x8 | 0x80), "hw slowdown, hw power brake");
}

TEST(ClockMonitor, AGpuThatIsNotThereIsUnavailableAndReportsNothing) {
  // No GPU sits at this bus id, with or without NVML on the machine.
  ClockMonitor m("ffff:ff:1f.7");
  EXPECT_FALSE(m.available());
  EXPECT_FALSE(m.why_unavailable().empty());
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(m.stop().has_value());
  EXPECT_FALSE(m.stop().has_value());  // stop without start: nothing, no crash
}

}  // namespace
}  // namespace fp4moe
