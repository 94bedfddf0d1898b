// --cuda-device (see cuda_device.h).
#include "cli/cuda_device.h"

#include "cli/validators.h"
#include "fp4moe/error.h"

namespace fp4moe::cli {

CLI::Option* CudaDeviceArg::add_to(CLI::App* cmd) {
  return cmd
      ->add_option_function<int>(
          "--cuda-device",
          [this](int n) {
            index = n;
            given = true;
          },
          "The GPU to use: CUDA device N, counted as CUDA_VISIBLE_DEVICES leaves them (default 0)")
      ->transform(IntegerIn(0, 1023));
}

const GpuSpec& require_cuda_device(const CudaEnvironment& env, const CudaDeviceArg& arg, const std::string& command) {
  const std::string named = arg.given ? "--cuda-device " + std::to_string(arg.index) + ": " : "";
  FP4MOE_CHECK(!env.devices.empty(), command, ": ", named, "no usable GPU (", env.error, ")");
  const int n = static_cast<int>(env.devices.size());
  if (arg.index < n) return env.devices[arg.index];
  std::string listed;
  for (const GpuSpec& g : env.devices)
    listed += (listed.empty() ? "" : ", ") + std::to_string(g.device_index) + ": " + g.name;
  FP4MOE_FAIL(command, ": ", named, "this machine has ", n, " usable GPU", n == 1 ? "" : "s", " (",
              listed, ")");
}

}  // namespace fp4moe::cli
