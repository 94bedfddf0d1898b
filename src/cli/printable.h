// Text read from files (a checkpoint's model_type, a tensor's name, a tuning cache's GPU name)
// printed as it is could carry a newline that breaks a one-line message or a terminal escape
// sequence that the user's terminal would obey: control bytes are printed as \xNN instead.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace fp4moe::cli {

inline std::string printable(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7F) {
      s += ch;
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      s += esc;
    }
  }
  return s;
}

}  // namespace fp4moe::cli
