#include "bench/clock_monitor.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include "common/runtime_library.h"

namespace fp4moe {
namespace {

// The few NVML entry points used, declared by hand (the toolkit ships no nvml.h): a stable C ABI
// where every call returns 0 (NVML_SUCCESS) or an error code.
using NvmlDevice = void*;
struct NvmlApi {
  int (*init)() = nullptr;                                           // nvmlInit_v2
  int (*shutdown)() = nullptr;                                       // nvmlShutdown
  int (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;          // nvmlDeviceGetHandleByPciBusId_v2
  int (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;           // nvmlDeviceGetClockInfo
  int (*power_usage)(NvmlDevice, unsigned*) = nullptr;               // nvmlDeviceGetPowerUsage (mW)
  int (*clock_reasons)(NvmlDevice, unsigned long long*) = nullptr;  // nvmlDeviceGetCurrentClocksThrottleReasons
  std::string failure;
};
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

const NvmlApi& nvml() {
  static NvmlApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    RuntimeLibrary lib("NVML", "libnvidia-ml.so.1");
    lib.bind(api.init, "nvmlInit_v2");
    lib.bind(api.shutdown, "nvmlShutdown");
    lib.bind(api.handle_by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    lib.bind(api.clock_info, "nvmlDeviceGetClockInfo");
    lib.bind(api.power_usage, "nvmlDeviceGetPowerUsage");
    lib.bind(api.clock_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    api.failure = lib.failure();
  });
  return api;
}

}  // namespace

std::string describe_clock_reasons(uint64_t reasons) {
  // NVML's clock-event reason bits (nvmlClocksEventReason*).
  static const std::pair<uint64_t, const char*> kNames[] = {
      {0x4, "sw power cap"},         {0x8, "hw slowdown"},          {0x10, "sync boost"},
      {0x20, "sw thermal slowdown"}, {0x40, "hw thermal slowdown"}, {0x80, "hw power brake"}};
  std::string out;
  for (const auto& [bit, name] : kNames)
    if (reasons & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  return out.empty() ? "none" : out;
}

ClockMonitor::ClockMonitor(const std::string& pci_bus_id) {
  const NvmlApi& api = nvml();
  if (!api.failure.empty()) {
    why_ = api.failure;
    return;
  }
  if (const int rc = api.init(); rc != 0) {
    why_ = "nvmlInit failed (" + std::to_string(rc) + ")";
    return;
  }
  NvmlDevice d = nullptr;
  if (const int rc = api.handle_by_pci(pci_bus_id.c_str(), &d); rc != 0 || !d) {
    why_ = "NVML knows no GPU at PCI " + pci_bus_id + " (" + std::to_string(rc) + ")";
    api.shutdown();
    return;
  }
  device_ = d;
}

ClockMonitor::~ClockMonitor() {
  if (running_) stop();
  if (device_) nvml().shutdown();
}

void ClockMonitor::start() {
  if (!device_ || running_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    acc_ = ClockSample{};
    mhz_sum_ = 0;
  }
  running_ = true;
  thread_ = std::thread([this] { run(); });
}

std::optional<ClockSample> ClockMonitor::stop() {
  if (!running_) return std::nullopt;
  running_ = false;
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (acc_.samples == 0) return std::nullopt;
  ClockSample s = acc_;
  s.sm_mhz_mean = mhz_sum_ / s.samples;
  return s;
}

void ClockMonitor::run() {
  const NvmlApi& api = nvml();
  auto device = static_cast<NvmlDevice>(device_);
  do {
    unsigned mhz = 0, mw = 0;
    unsigned long long reasons = 0;
    // A sample needs the clock; power and reasons are taken when the driver gives them.
    if (api.clock_info(device, kNvmlClockSm, &mhz) == 0 && mhz > 0) {
      const bool has_power = api.power_usage(device, &mw) == 0;
      const bool has_reasons = api.clock_reasons(device, &reasons) == 0;
      std::lock_guard<std::mutex> lock(mu_);
      acc_.sm_mhz_min = acc_.samples == 0 ? mhz : std::min(acc_.sm_mhz_min, mhz);
      acc_.sm_mhz_max = std::max(acc_.sm_mhz_max, mhz);
      mhz_sum_ += mhz;
      ++acc_.samples;
      if (has_power) acc_.power_w_max = std::max(acc_.power_w_max, mw / 1000.0);
      if (has_reasons) acc_.reasons |= reasons;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (running_);
}

}  // namespace fp4moe
