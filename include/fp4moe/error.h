// fp4moe/error.h - the one exception type of the library and the checks that throw it.
//
// Every public entry point validates its input and throws fp4moe::Error with a message that
// names what is wrong ("K = 100 is not a multiple of the NVFP4 block size 16"). The source
// location is kept apart from the message so that the CLI can print one clean line.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace fp4moe {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line)
      : std::runtime_error(std::move(message)), file_(file), line_(line) {}
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Args>
[[noreturn]] void throw_error(const char* file, int line, Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  // A NUL from a file (a tensor name "a\u0000b") would end what() there, and the reason with it.
  std::string message = os.str();
  for (size_t i = message.find('\0'); i != std::string::npos; i = message.find('\0', i + 2)) message.replace(i, 1, "\\0");
  throw Error(std::move(message), file, line);
}
}  // namespace detail

// a x b for sizes a caller gives (rows x cols, tokens x experts): an Error naming `what` where a
// factor is negative or the product leaves int64, so that a wrapped product can never pass a
// size comparison and index past a buffer.
inline int64_t checked_size(int64_t a, int64_t b, const char* what) {
  int64_t n = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &n))
    detail::throw_error(__FILE__, __LINE__, what, ": size ", a, " x ", b,
                        a < 0 || b < 0 ? " is negative" : " overflows a 64-bit count");
  return n;
}

}  // namespace fp4moe

// FP4MOE_CHECK(cond, parts...): throws fp4moe::Error(parts...) when cond is false.
#define FP4MOE_CHECK(cond, ...)                                              \
  do {                                                                       \
    if (!(cond)) ::fp4moe::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define FP4MOE_FAIL(...) ::fp4moe::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__)
