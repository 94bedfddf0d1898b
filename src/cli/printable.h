// Text read from files (a checkpoint's model_type, a tensor's name, a tuning cache's GPU name)
// printed as it is could carry a newline that breaks a one-line message or a terminal escape
// sequence that the user's terminal would obey: control bytes (C0, DEL, and the C1 controls
// U+0080-U+009F in their UTF-8 form) are printed as \xNN instead. Other UTF-8 passes.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace fp4moe::cli {

inline std::string printable(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  auto escape = [&](unsigned char c) {
    char esc[8];
    std::snprintf(esc, sizeof esc, "\\x%02x", c);
    s += esc;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const unsigned char next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c < 0x20 || c == 0x7F) {
      escape(c);
    } else if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {  // U+0080-U+009F
      escape(c);
      escape(next);
      ++i;
    } else {
      s += static_cast<char>(c);
    }
  }
  return s;
}

}  // namespace fp4moe::cli
