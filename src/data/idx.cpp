// IDX files through zlib, which reads gzipped and plain files alike, and writes gzipped ones.
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "mantissa/core/input_file.h"
#include "mantissa/core/output_file.h"
#include "array_file.h"
#include "mantissa/data/datasets.h"

namespace mantissa {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw DataError(path.string() + ": " + what);
}

class GzFile {
 public:
  // For writing (mode "wb", or "wbT" uncompressed) into the one writer's temporary file, through a
  // descriptor of its own (gzclose closes it; the writer then commits).
  GzFile(AtomicFile& out, const char* mode) : path_(out.path()) {
    const int fd = ::dup(out.fd());
    if (fd < 0) fail(path_, std::string("cannot write it (") + std::strerror(errno) + ")");
    f_ = gzdopen(fd, mode);
    if (f_ == nullptr) {
      ::close(fd);
      fail(path_, "cannot write it through zlib");
    }
  }
  // For reading: the descriptor of the one opener, which has refused what is not a regular file.
  explicit GzFile(InputFile&& in) : path_(in.path()) {
    const int fd = in.release();
    f_ = gzdopen(fd, "rb");
    if (f_ == nullptr) {
      ::close(fd);
      fail(path_, "cannot read it through zlib");
    }
  }
  ~GzFile() {
    if (f_ != nullptr) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly n bytes or throws saying what was expected.
  void read(void* out, std::size_t n, const char* what) {
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1U << 30));
      const int got = gzread(f_, static_cast<char*>(out) + done, chunk);
      if (got < 0) {
        int code = 0;
        fail(path_, std::string("corrupt compressed data (") + gzerror(f_, &code) + ")");
      }
      if (got == 0) fail(path_, std::string("truncated: ") + what + " ends after " + std::to_string(done) + " of " + std::to_string(n) + " bytes");
      done += static_cast<std::size_t>(got);
    }
  }
  // Reads up to n bytes; returns how many (0 at the end of the data).
  std::size_t read_some(void* out, std::size_t n) {
    const int got = gzread(f_, out, static_cast<unsigned>(std::min<std::size_t>(n, 1U << 30)));
    if (got < 0) {
      int code = 0;
      fail(path_, std::string("corrupt compressed data (") + gzerror(f_, &code) + ")");
    }
    return static_cast<std::size_t>(got);
  }
  bool at_end() {
    char c;
    return gzread(f_, &c, 1) == 0;
  }
  void write(const void* data, std::size_t n) {
    if (n > 0 && gzwrite(f_, data, static_cast<unsigned>(n)) != static_cast<int>(n)) fail(path_, "write failed");
  }
  void close() {
    const int rc = gzclose(f_);
    f_ = nullptr;
    if (rc != Z_OK) fail(path_, "closing failed");
  }

 private:
  std::filesystem::path path_;
  gzFile f_;
};

}  // namespace

IdxArray read_idx(const std::filesystem::path& path) try {
  return detail::read_idx(detail::open_array_file(path, "an IDX file"));
} catch (...) {
  rethrow_as<DataError>(path.string());
}

InputFile detail::open_array_file(const std::filesystem::path& path, std::string_view kind) {
  {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail(path, "no such file");
  }
  try {
    return InputFile(path, kind, kMaxIdxBytes);
  } catch (const InputFileError& e) {
    throw DataError(e.what());
  }
}

IdxArray detail::read_idx(InputFile&& in) {
  const std::filesystem::path path = in.path();
  GzFile f(std::move(in));
  std::uint8_t magic[4];
  f.read(magic, 4, "the header");
  if (magic[0] != 0 || magic[1] != 0) fail(path, "not an IDX file (bad magic number)");
  if (magic[2] != 0x08) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", magic[2]);
    fail(path, std::string("IDX element type ") + type + " is not supported (only unsigned bytes, 0x08)");
  }
  const int rank = magic[3];
  if (rank < 1 || rank > 4) fail(path, "IDX rank " + std::to_string(rank) + " is not in 1..4");
  IdxArray a;
  std::int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    std::uint8_t b[4];
    f.read(b, 4, "the dimensions");
    const std::int64_t n = (std::int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    if (n <= 0 || n > (std::int64_t{1} << 31)) fail(path, "dimension " + std::to_string(d) + " is " + std::to_string(n));
    a.dims.push_back(n);
    constexpr std::int64_t kMaxBytes = std::int64_t{1} << 34;
    if (n > kMaxBytes / count) fail(path, "the array would be larger than 16 GiB");  // checked before it can wrap
    count *= n;
  }
  // The array grows as the data arrives: a header claiming more than the file holds costs what the file
  // holds, not what the header claims (a 59-byte gzip asked for 16 GiB up front).
  const auto total = static_cast<std::size_t>(count);
  constexpr std::size_t kChunk = std::size_t{16} << 20;
  std::size_t done = 0;
  while (done < total) {
    a.data.resize(done + std::min(kChunk, total - done));
    const std::size_t got = f.read_some(a.data.data() + done, a.data.size() - done);
    if (got == 0) {
      fail(path, "truncated: the data ends after " + std::to_string(done) + " of the " + std::to_string(total) +
                     " bytes its header describes");
    }
    done += got;
  }
  if (!f.at_end()) fail(path, "has bytes after the data its header describes");
  return a;
}

void write_idx(const std::filesystem::path& path, const IdxArray& array) {
  const bool gz = path.extension() == ".gz";
  AtomicFile out(path, "the IDX file");
  GzFile f(out, gz ? "wb" : "wbT");  // T: no compression
  const std::uint8_t magic[4] = {0, 0, 0x08, static_cast<std::uint8_t>(array.dims.size())};
  f.write(magic, 4);
  for (std::int64_t n : array.dims) {
    const std::uint8_t b[4] = {static_cast<std::uint8_t>(n >> 24), static_cast<std::uint8_t>(n >> 16),
                               static_cast<std::uint8_t>(n >> 8), static_cast<std::uint8_t>(n)};
    f.write(b, 4);
  }
  f.write(array.data.data(), array.data.size());
  f.close();
  out.commit();
}

}  // namespace mantissa
