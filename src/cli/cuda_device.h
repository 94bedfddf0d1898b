// --cuda-device N: which GPU a single-GPU command (run, bench, tune, cache path) works on. A
// machine of eight GPUs - the deployment this tool exists for - tunes, benches and checks each
// card on its own; without the option every command takes CUDA device 0.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "fp4moe/hw.h"

namespace fp4moe::cli {

struct CudaDeviceArg {
  int index = 0;       // CUDA's ordinal, counted after CUDA_VISIBLE_DEVICES
  bool given = false;  // set by the option's parse: an explicit choice must exist

  CLI::Option* add_to(CLI::App* cmd);
};

// The device `arg` names, as the runtime reports it; a one-line error naming the GPUs there are
// (or why there is none) where it does not exist. `command` prefixes the message.
const GpuSpec& require_cuda_device(const CudaEnvironment& env, const CudaDeviceArg& arg, const std::string& command);

}  // namespace fp4moe::cli
