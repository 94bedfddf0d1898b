// wake_gpu: the GPU's state before a first timing. The first GPU work after seconds of host-only
// work ran slower than the same work later in the process (H200, glm5 T = 1: 76.8 against 72.6
// us when timed first after 5 warm-up runs, ~0.6 ms of them; 200 runs, ~20 ms, removed it), so
// the benchmark and the tuner call this before timing anything that follows such host work.
#pragma once

namespace fp4moe {

inline constexpr double kWakeSeconds = 0.05;

// L2 flushes (reads of a buffer twice the L2) back to back for `seconds` of wall time, synchronized.
void wake_gpu(double seconds = kWakeSeconds);

}  // namespace fp4moe
