// fp4moe: the command-line tool. Errors leave as one line on stderr and a non-zero exit.
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli/commands.h"
#include "cli/printable.h"
#include "fp4moe/error.h"
#include "fp4moe/version.h"

// Errors are printed through printable(): a name a message quotes from a file ("F32\nBAD" as a
// dtype) must not break the one-line error into two.
int main(int argc, char** argv) {
  CLI::App app{"fp4moe " FP4MOE_VERSION
               ": Mixture-of-Experts layers with NVFP4 expert weights on NVIDIA GPUs"};
  app.require_subcommand(1);
  // Every option's default in --help ("=4" after -t's type): what a run takes when it is not given.
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "fp4moe " FP4MOE_VERSION);
  fp4moe::cli::register_info(app);
  fp4moe::cli::register_quantize(app);
  fp4moe::cli::register_run(app);
  fp4moe::cli::register_bench(app);
  fp4moe::cli::register_tactics(app);
  fp4moe::cli::register_synth(app);
  fp4moe::cli::register_inspect(app);
  fp4moe::cli::register_tune(app);
  // A first word that names no command: CLI11 would only say that a command is required.
  if (argc >= 2 && argv[1][0] != '-') {
    std::string commands;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known |= sub->check_name(argv[1]);
      commands += (commands.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "fp4moe: error: unknown command '%s' (commands: %s)\n",
                   fp4moe::cli::printable(argv[1]).c_str(), commands.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    // Printed by CLI11 to std::cout: a write that failed is an error there too.
    const int rc = app.exit(e);
    if (!std::cout.flush()) {
      std::fprintf(stderr, "fp4moe: error: writing to standard output failed\n");
      return 1;
    }
    return rc;
  } catch (const CLI::ParseError& e) {
    // One line: CLI11's message, then where to look.
    std::fprintf(stderr, "fp4moe: error: %s (see fp4moe --help)\n", fp4moe::cli::printable(e.what()).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    // A size the up-front checks did not foresee; name the cause rather than the exception.
    std::fprintf(stderr, "fp4moe: error: out of host memory (an allocation failed)\n");
    return 1;
  } catch (const fp4moe::Error& e) {
    std::fprintf(stderr, "fp4moe: error: %s\n", fp4moe::cli::printable(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4moe: error: %s\n", fp4moe::cli::printable(e.what()).c_str());
    return 1;
  }
  // What the command printed may still sit in stdout's buffer: a full disk or a closed pipe shows
  // only when it is flushed, and a report that did not arrive is no success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "fp4moe: error: writing to standard output failed\n");
    return 1;
  }
  return 0;
}
