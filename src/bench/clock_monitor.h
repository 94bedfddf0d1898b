// The GPU's SM clock, power and clock-event reasons while a measurement runs, sampled through
// NVML in a background thread. Prefill-sized layers and the cuBLAS ceiling run the H200 into its
// power cap (700 W): the SM clock then falls from 1980 MHz to 1500-1700, and by how much depends
// on the work and on the GPU's recent history. Two processes of one binary measured the same
// layer 7% apart; the clocks say whether that was the kernel or the GPU. NVML is loaded at run
// time (libnvidia-ml.so.1, part of the driver): without it, or without a GPU, the monitor is
// unavailable and reports nothing, and nothing else changes. NVML's reading is not always what
// the SMs run at: on the H200 under load it read 1980 MHz while the kernels counted 1.5-1.8 GHz
// of cycles per second (clock64 over %globaltimer), which is why the bench also prints the
// clock our GEMMs measure themselves (GpuMoeLayer::set_clock_accounting).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace fp4moe {

// Over one monitored interval.
struct ClockSample {
  int samples = 0;
  double sm_mhz_mean = 0;
  unsigned sm_mhz_min = 0, sm_mhz_max = 0;
  // NVML averages power over 1 s (Ampere and later): short runs read low. (Its total-energy
  // counter, read at start() and stop(), was tried for a mean power instead: over the bench's
  // 0.01-0.6 s loops on the H200 it read 0 W or up to 1235 W - it advances in coarse steps.)
  double power_w_max = 0;
  uint64_t reasons = 0;  // every clock-event reason seen (NVML bits; describe_clock_reasons)
};

// "sw power cap, hw slowdown" for the reasons that lower the clock ("none" for none of them;
// idle and the application-clock setting are not reasons a loaded GPU slows down for).
std::string describe_clock_reasons(uint64_t reasons);

class ClockMonitor {
 public:
  // The GPU at this PCI bus id ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes it). Never
  // throws.
  explicit ClockMonitor(const std::string& pci_bus_id);
  ~ClockMonitor();
  ClockMonitor(const ClockMonitor&) = delete;
  ClockMonitor& operator=(const ClockMonitor&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why_unavailable() const { return why_; }

  // Samples every millisecond from start() until stop(); stop() returns what was seen (nothing
  // when unavailable or when no sample succeeded).
  void start();
  std::optional<ClockSample> stop();

 private:
  void run();

  void* device_ = nullptr;  // nvmlDevice_t
  std::string why_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::mutex mu_;
  ClockSample acc_;
  double mhz_sum_ = 0;
};

}  // namespace fp4moe
