// The one way mantissa writes a file (checkpoints, exports, plots, reports, plans, metrics, telemetry).
// A whole file is written under a fresh temporary name in the target's directory, created with
// O_CREAT|O_EXCL|O_NOFOLLOW (a name or link planted there is never opened, followed or renamed into
// place), synced, and renamed over the target: a reader, or a run killed at any point, sees the old
// file or the new one, never half of one. The target must be absent or a regular file: a symbolic
// link, a device, a FIFO or a directory at the path is refused, never replaced or written through. Lines
// are appended only to a regular file, and through a symbolic link only when the caller says so.
// The checks run before any work, so a run learns at step 0, not after an hour, that its output
// cannot be written. (tests/unit/output_file_test.cpp scans the sources for any other way of writing.)
#pragma once

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mantissa/base/errors.h"

namespace mantissa {

// A path that cannot be written (empty, a link or a special file where a file should be, a directory
// that does not exist or takes no new file): the caller named a bad output. "<what> <path>: <why>".
class OutputPathError : public UsageError {
 public:
  using UsageError::UsageError;
};
// A write that failed on its way (a full disk, an I/O error); the target is left as it was.
class OutputWriteError : public Error {
 public:
  using Error::Error;
};

// `what` names the output in errors (a flag, "the checkpoint directory").
// A whole file can be written at path: it is absent or a regular file, and its directory takes a new
// file (one is made and removed).
void check_output_file(const std::filesystem::path& path, std::string_view what);
// Lines can be appended at path: absent (and its directory takes a new file) or a regular file, or a
// symbolic link to one when follow_symlink.
void check_append_file(const std::filesystem::path& path, std::string_view what, bool follow_symlink);
// dir is a directory that takes new files; made, with its parents, when absent.
void check_output_directory(const std::filesystem::path& dir, std::string_view what);

// A whole file, written and then committed in one rename; destroyed uncommitted, the temporary is
// removed and the target is untouched.
class AtomicFile {
 public:
  AtomicFile(const std::filesystem::path& path, std::string_view what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void write(const void* data, std::size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // The open descriptor of the temporary (for a library that writes through one, such as zlib: give it
  // a dup() and finish with it before commit()).
  int fd() const { return fd_; }
  // Synced, renamed over the target, the directory synced.
  void commit();

 private:
  std::filesystem::path path_, temp_;
  std::string what_;
  int fd_ = -1;
};

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string_view what);

// Lines appended to a file as a run goes: each write() goes out at once, in one system call.
class AppendFile {
 public:
  AppendFile(const std::filesystem::path& path, std::string_view what, bool follow_symlink);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  void write(std::string_view text);

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
};

}  // namespace mantissa
