// The one way a file the user names is opened for reading (data sets, text corpora, safetensors,
// telemetry, precision plans): open() with O_NONBLOCK, so that a FIFO with no writer cannot hang it,
// then fstat, and anything but a regular file (a FIFO, a device such as /dev/zero, a directory, a
// socket) is refused, as is a file past the byte limit its kind allows. Reading stops at the limit too,
// so a file that grows while it is read cannot run the allocator out either.
// (tests/unit/input_file_test.cpp scans the sources for any other way of opening a file for reading.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/base/errors.h"

namespace mantissa {

// A refusal: "<path>: not a regular file (a FIFO)", "<path>: 3 GiB, more than a text corpus may be (1 GiB)".
class InputFileError : public Error {
 public:
  using Error::Error;
};

class InputFile {
 public:
  // kind names the file in errors ("a text corpus"); max_bytes is its limit.
  InputFile(const std::filesystem::path& path, std::string_view kind, std::uint64_t max_bytes);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t size() const { return size_; }  // at open
  // The descriptor, handed over (to zlib's gzdopen): this object no longer closes it.
  int release();
  // Up to n bytes from the current position; 0 at the end. Throws on a read error or past the limit.
  std::size_t read(void* out, std::size_t n);
  // Exactly n bytes, or throws naming `what` and how much there was.
  void read_exactly(void* out, std::size_t n, std::string_view what);
  // Exactly n bytes at byte offset `offset` (the position is not moved), or throws as read_exactly.
  void read_exactly_at(std::uint64_t offset, void* out, std::size_t n, std::string_view what);
  // The rest of the file.
  std::vector<std::uint8_t> read_all();
  std::string read_text();
  // The next line (without its '\n'; the last may lack one), or false at the end. A line longer than
  // max_line bytes is an error naming its number, found before more than that is held: a file of one
  // endless line (a sparse file of zeros) is refused at once instead of read whole.
  bool read_line(std::string& line, std::size_t max_line);

 private:
  std::filesystem::path path_;
  std::string kind_;
  std::uint64_t max_bytes_, size_ = 0, read_ = 0;
  int fd_ = -1;
  std::vector<char> buffer_;  // read_line's: bytes read, not yet returned, from pos_
  std::size_t pos_ = 0;
  std::int64_t lines_ = 0;
};

// Byte limits of the kinds of file mantissa reads.
inline constexpr std::uint64_t kMaxTextBytes = std::uint64_t{1} << 30;        // a text corpus, or a directory of them
inline constexpr std::uint64_t kMaxIdxBytes = std::uint64_t{4} << 30;         // an IDX file (compressed or not)
inline constexpr std::uint64_t kMaxSafetensorsBytes = std::uint64_t{64} << 30;
inline constexpr std::uint64_t kMaxTelemetryBytes = std::uint64_t{4} << 30;
inline constexpr std::uint64_t kMaxPlanBytes = std::uint64_t{16} << 20;       // a precision plan (JSON)

}  // namespace mantissa
