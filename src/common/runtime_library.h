// A shared library opened at run time (dlopen) and its entry points bound by name (dlsym): the
// optional dependencies - NCCL for the multi-GPU paths, NVML for the bench's clocks - that the
// tool must start without. The first thing missing is kept as `failure`, for the caller's message.
#pragma once

#include <dlfcn.h>

#include <string>

namespace fp4moe {

class RuntimeLibrary {
 public:
  // `what` names the library in messages ("NCCL"); file is what dlopen is given.
  RuntimeLibrary(const std::string& what, const std::string& file) : what_(what), file_(file) {
    handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open for the process
    if (!handle_) {
      const char* why = dlerror();
      failure_ = "cannot load " + what + " (" + file + "): " + (why ? why : "unknown error");
    }
  }

  bool ok() const { return failure_.empty(); }
  const std::string& failure() const { return failure_; }

  // fn = the symbol `name`; a missing one becomes the failure (the first only).
  template <typename Fn>
  void bind(Fn*& fn, const char* name) {
    fn = handle_ ? reinterpret_cast<Fn*>(dlsym(handle_, name)) : nullptr;
    if (!fn && failure_.empty()) failure_ = what_ + " library " + file_ + " has no symbol " + name;
  }
  // The same for a symbol that later versions added: nullptr where it is missing, no failure.
  template <typename Fn>
  void bind_optional(Fn*& fn, const char* name) {
    fn = handle_ ? reinterpret_cast<Fn*>(dlsym(handle_, name)) : nullptr;
  }

 private:
  std::string what_, file_;
  void* handle_ = nullptr;
  std::string failure_;
};

}  // namespace fp4moe
