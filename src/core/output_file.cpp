// The one writer (mantissa/core/output_file.h): checks by lstat, temporaries by O_EXCL|O_NOFOLLOW,
// commits by rename.
#include "mantissa/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "file_type.h"

namespace mantissa {
namespace {

std::string named(std::string_view what, const std::filesystem::path& path) {
  return std::string(what) + " " + path.string() + ": ";
}

[[noreturn]] void refuse(std::string_view what, const std::filesystem::path& path, const std::string& why) {
  throw OutputPathError(named(what, path) + why);
}

void refuse_empty(const std::filesystem::path& path, std::string_view what) {
  if (path.empty()) throw OutputPathError(std::string(what) + ": an empty path (leave the flag out for none)");
}

std::filesystem::path directory_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

// The target of a whole-file write: absent, or a regular file (a link is looked at, not followed).
void check_target(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return;  // absent (a directory that is not one: said next)
    refuse(what, path, std::string("cannot look at it (") + std::strerror(errno) + ")");
  }
  if (S_ISLNK(st.st_mode)) {
    refuse(what, path, "a symbolic link, which mantissa neither writes through nor replaces (name the file it points to)");
  }
  if (!S_ISREG(st.st_mode)) refuse(what, path, std::string("not a regular file (") + file_type(st.st_mode) + ")");
}

// A new, empty file beside `target` under a name no one else has: O_EXCL fails on anything already
// there (a file, a link, a FIFO), and the suffix is tried afresh. Returns the descriptor, or -1 with errno.
int create_temporary(const std::filesystem::path& target, std::filesystem::path& temp) {
  static std::random_device entropy;
  for (int attempt = 0; attempt < 64; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".partial-%08x", static_cast<unsigned>(entropy()));
    temp = target;
    temp += suffix;
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// The directory of `path` exists, is a directory, and takes a new file.
void check_directory_takes_a_file(const std::filesystem::path& path, std::string_view what) {
  const std::filesystem::path dir = directory_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const std::string why = errno == ENOENT    ? " does not exist"
                            : errno == ENOTDIR ? " is not a directory (a file lies on its path)"
                                               : " cannot be looked at (" + std::string(std::strerror(errno)) + ")";
    refuse(what, path, "its directory " + dir.string() + why);
  }
  if (!S_ISDIR(st.st_mode)) refuse(what, path, dir.string() + " is not a directory (" + file_type(st.st_mode) + ")");
  std::filesystem::path temp;
  const int fd = create_temporary(path, temp);
  if (fd < 0) refuse(what, path, "cannot create a file in " + dir.string() + " (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(temp.c_str());
}

void write_all(int fd, const void* data, std::size_t n, const std::string& what_path) {
  const auto* b = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw OutputWriteError(what_path + "writing failed (" + std::strerror(errno) + ")");
    }
    b += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

void check_output_file(const std::filesystem::path& path, std::string_view what) {
  refuse_empty(path, what);
  check_target(path, what);
  check_directory_takes_a_file(path, what);
}

void check_append_file(const std::filesystem::path& path, std::string_view what, bool follow_symlink) {
  refuse_empty(path, what);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) refuse(what, path, std::string("cannot look at it (") + std::strerror(errno) + ")");
    check_directory_takes_a_file(path, what);  // absent: its directory must take it
    return;
  }
  // Where it exists, opening it without creating anything says all (AppendFile's own refusals).
  AppendFile probe(path, what, follow_symlink);
}

void check_output_directory(const std::filesystem::path& dir, std::string_view what) {
  refuse_empty(dir, what);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    refuse(what, dir, "cannot make the directory (" + (ec ? ec.message() : std::string(std::strerror(errno))) + ")");
  }
  if (!S_ISDIR(st.st_mode)) refuse(what, dir, std::string("not a directory (") + file_type(st.st_mode) + ")");
  check_directory_takes_a_file(dir / "probe", what);
}

AtomicFile::AtomicFile(const std::filesystem::path& path, std::string_view what) : path_(path), what_(what) {
  refuse_empty(path, what);
  check_target(path, what);
  fd_ = create_temporary(path, temp_);
  if (fd_ < 0) refuse(what, path, "cannot create a file in " + directory_of(path).string() + " (" + std::strerror(errno) + ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (fd_ < 0) throw std::logic_error("AtomicFile: write after commit");
  write_all(fd_, data, n, named(what_, path_));
}

void AtomicFile::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFile: committed twice");
  if (::fsync(fd_) != 0) throw OutputWriteError(named(what_, path_) + "writing failed (" + std::strerror(errno) + ")");
  check_target(path_, what_);  // again: something may have been put there since the start
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    throw OutputWriteError(named(what_, path_) + "cannot put the file in place (" + std::strerror(errno) + ")");
  }
  ::close(fd_);
  fd_ = -1;
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // the rename itself is durable
    ::close(dir);
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string_view what) {
  AtomicFile f(path, what);
  f.write(bytes);
  f.commit();
}

AppendFile::AppendFile(const std::filesystem::path& path, std::string_view what, bool follow_symlink)
    : path_(path), what_(what) {
  refuse_empty(path, what);
  // Non-blocking, so that a FIFO with a reader cannot hold the open (and one without fails at once).
  const int flags = O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (follow_symlink ? 0 : O_NOFOLLOW);
  fd_ = ::open(path.c_str(), flags, 0666);
  if (fd_ < 0) {
    if (errno == ELOOP) {
      refuse(what, path, "a symbolic link, which mantissa appends through only when asked (--follow-symlinks)");
    }
    if (errno == ENXIO) refuse(what, path, "not a regular file (a FIFO)");
    if (errno == EISDIR) refuse(what, path, "not a regular file (a directory)");
    refuse(what, path, std::string("cannot open it for appending (") + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISREG(st.st_mode) ? std::strerror(errno) : file_type(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    refuse(what, path, "not a regular file (" + why + ")");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::write(std::string_view text) { write_all(fd_, text.data(), text.size(), named(what_, path_)); }

}  // namespace mantissa
