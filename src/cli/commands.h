// The fp4moe subcommands: each file registers one with the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace fp4moe::cli {

void register_info(CLI::App& app);
void register_quantize(CLI::App& app);
void register_run(CLI::App& app);
void register_bench(CLI::App& app);
void register_tactics(CLI::App& app);
void register_synth(CLI::App& app);
void register_inspect(CLI::App& app);
void register_tune(CLI::App& app);

}  // namespace fp4moe::cli
