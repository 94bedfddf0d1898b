#include "io/text_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <cstring>
#include <sstream>

#include "fp4moe/error.h"

namespace fp4moe {

PathKind path_kind(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    FP4MOE_CHECK(errno == ENOENT || errno == ENOTDIR, path, ": cannot stat (", std::strerror(errno), ")");
    return PathKind::kMissing;
  }
  return S_ISREG(st.st_mode) ? PathKind::kRegularFile : S_ISDIR(st.st_mode) ? PathKind::kDirectory : PathKind::kOther;
}

std::string nearest_existing_path(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path);
  while (path_kind(p.string()) == PathKind::kMissing && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  return p.string();
}

void require_regular_file(const std::string& path) {
  struct stat st{};
  FP4MOE_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot stat (", std::strerror(errno), ")");
  FP4MOE_CHECK(S_ISREG(st.st_mode), path, ": not a regular file");
}

std::optional<std::string> read_text_file(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  require_regular_file(path);
  FP4MOE_CHECK(static_cast<size_t>(st.st_size) <= kMaxTextFileBytes, path, ": ", st.st_size,
               " bytes is too large for a configuration or index file (limit ", kMaxTextFileBytes, ")");
  std::ifstream f(path, std::ios::binary);
  FP4MOE_CHECK(f.good(), path, ": cannot open (", std::strerror(errno), ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  FP4MOE_CHECK(!f.bad(), path, ": read failed");
  return ss.str();
}

void require_writable_path(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    FP4MOE_CHECK(!S_ISDIR(st.st_mode), option, ": ", path, " is a directory");
    // Opening a FIFO for writing waits for a reader, for ever where none comes (a device such as
    // /dev/null is taken: it neither blocks nor keeps anything).
    FP4MOE_CHECK(!S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode), option, ": ", path,
                 " is a FIFO or socket, not a file (writing would wait for a reader)");
    FP4MOE_CHECK(::access(path.c_str(), W_OK) == 0, option, ": ", path, " is not writable (", std::strerror(errno), ")");
    return;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const bool dir_exists = ::stat(dir.c_str(), &st) == 0;
  FP4MOE_CHECK(dir_exists && S_ISDIR(st.st_mode), option, ": ", path, ": ", dir,
               dir_exists ? " is not a directory" : " does not exist (no such directory)");
  FP4MOE_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, option, ": ", path, ": the directory ", dir,
               " is not writable (", std::strerror(errno), ")");
}

void require_not_same_file(const std::string& input, const std::string& output, const std::string& option) {
  struct stat in{}, out{};
  if (::stat(input.c_str(), &in) != 0 || ::stat(output.c_str(), &out) != 0) return;
  FP4MOE_CHECK(in.st_dev != out.st_dev || in.st_ino != out.st_ino, option, ": ", output, " is the input ", input,
               " (it would be overwritten while, or before, it is read)");
}

void close_checked(std::ofstream& f, const std::string& path) {
  errno = 0;
  f.close();
  FP4MOE_CHECK(!f.fail(), path, ": write failed (", errno ? std::strerror(errno) : "stream error", ")");
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  FP4MOE_CHECK(f.good(), path, ": cannot open for writing (", std::strerror(errno), ")");
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  close_checked(f, path);
}

}  // namespace fp4moe
