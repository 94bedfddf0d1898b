// The checked file operations the readers and writers share: only regular files are opened (a
// FIFO would block the open, /dev/zero never end, a directory fail obscurely), small text files
// are read whole up to a limit, and a write is checked after the stream is closed (a full disk
// shows only when the buffer is flushed).
#pragma once

#include <fstream>
#include <optional>
#include <string>

namespace fp4moe {

// config.json, hf_quant_config.json and the safetensors index are kilobytes to megabytes.
inline constexpr size_t kMaxTextFileBytes = size_t{100} << 20;

// What is at `path`. Throws "<path>: cannot stat (<reason>)" where the system cannot say (a name
// too long, a directory on the way that may not be searched): std::filesystem's queries threw
// their own exception there, which names neither the file that led to the path nor the entry.
enum class PathKind { kMissing, kRegularFile, kDirectory, kOther };
PathKind path_kind(const std::string& path);

// The longest leading part of `path` (made absolute) that exists: `path` itself where it exists.
// Where it is no directory, nothing below it can be created.
std::string nearest_existing_path(const std::string& path);

// Throws "<path>: not a regular file" (or "cannot stat") unless `path` is a regular file.
void require_regular_file(const std::string& path);

// The file's text; nullopt where nothing is at `path`. Throws where it is not a regular file,
// exceeds kMaxTextFileBytes or cannot be read.
std::optional<std::string> read_text_file(const std::string& path);

// Writes `text` to `path` (replacing it); throws where the open, the write or the close fails.
void write_text_file(const std::string& path, const std::string& text);

// Throws "<option>: <path>: ..." unless a file can be written at `path` (its directory exists
// and is writable; the path, where it exists, is no directory, FIFO or socket and is writable),
// so that an output a run cannot write is refused before the run, not after it (nor hangs in the
// open). An empty path passes.
void require_writable_path(const std::string& path, const std::string& option);

// Throws "<option>: <output> is the input <input> ..." where both name one existing file (the
// same path, a link to it): the output would replace the input. Passes where either is not a
// file there (an empty path: an option not given).
void require_not_same_file(const std::string& input, const std::string& output, const std::string& option);

// Closes `f` and throws "<path>: write failed (<reason>)" where any write to it failed.
void close_checked(std::ofstream& f, const std::string& path);

}  // namespace fp4moe
