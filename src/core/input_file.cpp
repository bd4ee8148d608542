// InputFile (mantissa/core/input_file.h): open non-blocking, decide on fstat, then read blocking.
#include "mantissa/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "file_type.h"

namespace mantissa {
namespace {

std::string bytes_text(std::uint64_t n) {
  if (n >= (std::uint64_t{1} << 30)) return std::to_string(n >> 30) + " GiB";
  if (n >= (std::uint64_t{1} << 20)) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

}  // namespace

InputFile::InputFile(const std::filesystem::path& path, std::string_view kind, std::uint64_t max_bytes)
    : path_(path), kind_(kind), max_bytes_(max_bytes) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) {
    throw InputFileError(path.string() + ": cannot open (" + (errno == ENOENT ? std::string("no such file") : std::strerror(errno)) + ")");
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISREG(st.st_mode) ? std::strerror(errno) : file_type(st.st_mode);
    ::close(fd_);
    throw InputFileError(path.string() + ": not a regular file (" + why + "), which " + kind_ + " must be");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ > max_bytes_) {
    ::close(fd_);
    throw InputFileError(path.string() + ": " + bytes_text(size_) + ", more than " + kind_ + " may be (" +
                         bytes_text(max_bytes_) + ")");
  }
  // A regular file: reads from here on block as usual.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::size_t InputFile::read(void* out, std::size_t n) {
  if (fd_ < 0) throw std::logic_error("InputFile: read after release");
  for (;;) {
    const ssize_t got = ::read(fd_, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputFileError(path_.string() + ": read failed: " + std::strerror(errno));
    read_ += static_cast<std::uint64_t>(got);
    if (read_ > max_bytes_) {
      throw InputFileError(path_.string() + ": grew past " + bytes_text(max_bytes_) + " while it was read, more than " + kind_ +
                           " may be");
    }
    return static_cast<std::size_t>(got);
  }
}

void InputFile::read_exactly(void* out, std::size_t n, std::string_view what) {
  std::size_t done = 0;
  while (done < n) {
    const std::size_t got = read(static_cast<char*>(out) + done, n - done);
    if (got == 0) {
      throw InputFileError(path_.string() + ": truncated: " + std::string(what) + " ends after " + std::to_string(done) + " of " +
                           std::to_string(n) + " bytes");
    }
    done += got;
  }
}

void InputFile::read_exactly_at(std::uint64_t offset, void* out, std::size_t n, std::string_view what) {
  if (fd_ < 0) throw std::logic_error("InputFile: read after release");
  if (offset > max_bytes_ || n > max_bytes_ - offset) {
    throw InputFileError(path_.string() + ": " + std::string(what) + " lies past " + bytes_text(max_bytes_) + ", more than " + kind_ +
                         " may be");
  }
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, static_cast<char*>(out) + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputFileError(path_.string() + ": read failed: " + std::strerror(errno));
    if (got == 0) {
      throw InputFileError(path_.string() + ": truncated: " + std::string(what) + " ends after " + std::to_string(done) + " of " +
                           std::to_string(n) + " bytes");
    }
    done += static_cast<std::size_t>(got);
  }
}

std::vector<std::uint8_t> InputFile::read_all() {
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(size_ - std::min(size_, read_)));
  std::uint8_t buf[1 << 16];
  for (std::size_t got; (got = read(buf, sizeof buf)) > 0;) out.insert(out.end(), buf, buf + got);
  return out;
}

bool InputFile::read_line(std::string& line, std::size_t max_line) {
  line.clear();
  for (;;) {
    const char* begin = buffer_.data() + pos_;
    const char* end = buffer_.data() + buffer_.size();
    // (memchr over an empty buffer, whose data() may be null, is undefined: not called then.)
    const char* newline = begin == end ? nullptr : static_cast<const char*>(std::memchr(begin, '\n', static_cast<std::size_t>(end - begin)));
    const std::size_t take = static_cast<std::size_t>((newline != nullptr ? newline : end) - begin);
    if (line.size() + take > max_line) {
      throw InputFileError(path_.string() + ": line " + std::to_string(lines_ + 1) + " is longer than a line of " + kind_ +
                           " may be (" + bytes_text(max_line) + ")");
    }
    line.append(begin, take);
    pos_ += take;
    if (newline != nullptr) {
      ++pos_;
      ++lines_;
      return true;
    }
    buffer_.resize(1 << 16);
    buffer_.resize(read(buffer_.data(), buffer_.size()));
    pos_ = 0;
    if (buffer_.empty()) {
      if (line.empty()) return false;
      ++lines_;
      return true;
    }
  }
}

std::string InputFile::read_text() {
  const std::vector<std::uint8_t> b = read_all();
  return {b.begin(), b.end()};
}

}  // namespace mantissa
