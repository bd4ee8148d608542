// Image classification sets in the MNIST layout, batch order, and byte-level text corpora.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string_view>

#include "mantissa/core/input_file.h"
#include "mantissa/core/memory.h"
#include "mantissa/data/datasets.h"

namespace mantissa {
namespace {

// One part of an image set in the MNIST layout, under any of the usual names: a file whose name has the
// split (train; t10k or test) and the part (images, labels) as words and a word starting with idx,
// gzipped or not: train-images-idx3-ubyte.gz, train-images.idx3-ubyte, emnist-digits-test-labels-idx1-ubyte;
// or a .npy file named so (train_images.npy), or as Keras saves them (x_train.npy, y_test.npy).
// The same name with and without .gz: the gzipped one, as before.
std::filesystem::path find_part(const std::filesystem::path& dir, bool train, const std::string& part) {
  std::map<std::string, std::filesystem::path> found;  // by name without .gz
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    const bool gz = name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0;
    const std::string stem = gz ? name.substr(0, name.size() - 3) : name;
    std::vector<std::string> words(1);
    for (const char ch : stem) {
      if (std::isalnum(static_cast<unsigned char>(ch))) words.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      else if (!words.back().empty()) words.emplace_back();
    }
    const auto has = [&](std::string_view w) { return std::find(words.begin(), words.end(), w) != words.end(); };
    const bool idx = std::any_of(words.begin(), words.end(), [](const std::string& w) { return w.rfind("idx", 0) == 0; });
    const bool npy = !gz && words.size() > 1 && words.back() == "npy";  // x and y: Keras' names of the parts
    const bool named = has(part) || (npy && has(part == "images" ? "x" : "y"));
    if (!(idx || npy) || !named || !(train ? has("train") : has("t10k") || has("test"))) continue;
    if (gz || found.count(stem) == 0) found[stem] = e.path();
  }
  const std::string what = std::string(train ? "training " : "test ") + part;
  if (found.empty()) {
    throw DataError(dir.string() + ": no " + what + " file (expected the MNIST layout: " + (train ? "train" : "t10k") + "-" + part +
                    "-idx" + (part == "images" ? "3" : "1") + "-ubyte[.gz]; test files may say test instead of t10k; or NumPy's " +
                    (train ? "train_" : "test_") + part + ".npy)");
  }
  if (found.size() > 1) {
    throw DataError(dir.string() + ": more than one file of " + what + " (" + found.begin()->second.filename().string() + " and " +
                    std::next(found.begin())->second.filename().string() + "): keep one per part in the directory");
  }
  return found.begin()->second;
}

// A whole regular file, through the one opener (a device or a pipe, /dev/zero, would be read until
// memory ran out, a FIFO would hang), within what is left of the text's limit (`budget`: a directory's
// files share it).
constexpr std::string_view kTextKind = "a text corpus (a file, or a directory's files together)";

// A gzip file's contents (every member), up to `budget` bytes: past it, a DataError (a small file can
// inflate to any size).
std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& in, const std::filesystem::path& path, std::uint64_t budget) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw DataError(path.string() + ": cannot start zlib");
  std::vector<std::uint8_t> out;
  std::uint8_t chunk[1 << 16];
  z.next_in = const_cast<Bytef*>(in.data());  // (zlib's API is not const; it does not write the input)
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (true) {
    z.next_out = chunk;
    z.avail_out = sizeof chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    out.insert(out.end(), chunk, chunk + (sizeof chunk - z.avail_out));
    if (out.size() > budget) {
      inflateEnd(&z);
      throw DataError(path.string() + ": decompresses to more than the text limit of " + std::to_string(budget) + " bytes");
    }
    if (rc == Z_STREAM_END && z.avail_in > 0) rc = inflateReset(&z);  // another member follows
    else if (rc == Z_STREAM_END) break;
    if (rc != Z_OK) {
      const std::string why = z.msg != nullptr ? z.msg : rc == Z_BUF_ERROR ? "the file ends inside the compressed data" : "zlib error";
      inflateEnd(&z);
      throw DataError(path.string() + ": corrupt gzip data (" + why + ")");
    }
  }
  inflateEnd(&z);
  return out;
}

// The compressor whose magic number opens `b`, where mantissa does not read its format (gzip it does).
const char* foreign_compression(const std::vector<std::uint8_t>& b) {
  const auto starts = [&](std::initializer_list<std::uint8_t> magic) {
    return b.size() >= magic.size() && std::equal(magic.begin(), magic.end(), b.begin());
  };
  if (starts({'B', 'Z', 'h'})) return "bzip2";
  if (starts({0xFD, '7', 'z', 'X', 'Z', 0x00})) return "xz";
  if (starts({0x28, 0xB5, 0x2F, 0xFD})) return "zstd";
  if (starts({'P', 'K', 0x03, 0x04})) return "zip";
  if (starts({'7', 'z', 0xBC, 0xAF, 0x27, 0x1C})) return "7z";
  return nullptr;
}

// Refuses bytes that are not text: other compressed formats and binary data, since training on their bytes
// would run and learn nothing (a model of compressed bytes reaches ln 256). `where` names them.
void check_text(const std::vector<std::uint8_t>& b, const std::string& where) {
  if (const char* tool = foreign_compression(b)) {
    throw DataError(where + ": " + tool + "-compressed, not text: decompress it first (gzip files are read as they are)");
  }
  // Text has no NUL bytes and few other control bytes (tab, newlines, form feed, escape are text's).
  std::size_t control = 0, nul = 0, first = b.size();
  for (std::size_t i = 0; i < b.size(); ++i) {
    const std::uint8_t c = b[i];
    const bool odd = c == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != 0x1B) || c == 0x7F;
    if (!odd) continue;
    ++control;
    nul += c == 0 ? 1 : 0;
    first = std::min(first, i);
  }
  if (nul > 0 || control * 100 > b.size()) {
    char at[64];
    std::snprintf(at, sizeof at, "byte 0x%02X at offset %zu", b[first], first);
    throw DataError(where + ": binary data, not text (" + std::to_string(control) + " control bytes, the first " + at +
                    "); a text model reads a text file or a directory of them");
  }
}

// A text corpus file, as text: a gzip file is read through zlib (deliberately: `.gz` or not, its
// contents are the text); other compressed formats and binary data are refused in one line (check_text).
std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path, std::uint64_t& budget) {
  std::vector<std::uint8_t> b;
  try {
    b = InputFile(path, kTextKind, budget).read_all();
  } catch (const InputFileError& e) {
    throw DataError(e.what());
  }
  if (b.size() >= 2 && b[0] == 0x1F && b[1] == 0x8B) b = gunzip(b, path, budget);
  check_text(b, path.string());
  budget -= std::min<std::uint64_t>(budget, b.size());
  return b;
}

}  // namespace

ImageDataset load_mnist_format(const std::filesystem::path& dir, bool train, double mean, double stddev) try {
  if (!std::filesystem::is_directory(dir)) throw DataError(dir.string() + ": not a directory");
  const std::filesystem::path image_path = find_part(dir, train, "images");
  const std::filesystem::path label_path = find_part(dir, train, "labels");
  return image_dataset(read_array(image_path), read_array(label_path), image_path.string(), label_path.string(), mean, stddev);
} catch (...) {
  rethrow_as<DataError>(dir.string());
}

ImageDataset image_dataset(const IdxArray& images, const IdxArray& labels, const std::string& image_name,
                           const std::string& label_name, double mean, double stddev) {
  if (images.dims.size() != 3 && images.dims.size() != 4) {
    throw DataError(image_name + ": expected [N, H, W] or [N, C, H, W] images, not " +
                    std::to_string(images.dims.size()) + " dimensions");
  }
  if (labels.dims.size() != 1) throw DataError(label_name + ": expected [N] labels");
  if (labels.dims[0] != images.dims[0]) {
    throw DataError(label_name + ": " + std::to_string(labels.dims[0]) + " labels for " +
                    std::to_string(images.dims[0]) + " images in " + image_name);
  }
  ImageDataset d;
  const bool planar = images.dims.size() == 4;
  const std::int64_t n = images.dims[0], c = planar ? images.dims[1] : 1;
  const std::int64_t h = images.dims[planar ? 2 : 1], w = images.dims[planar ? 3 : 2];
  if (n == 0) throw DataError(image_name + ": holds no images");
  if (c == 0 || h == 0 || w == 0) throw DataError(image_name + ": images of zero size");
  if (images.data.size() != static_cast<std::size_t>(n * c * h * w) || labels.data.size() != static_cast<std::size_t>(n)) {
    throw DataError(image_name + ": the pixels or labels do not fill their dimensions");
  }
  MemoryCategoryScope scope(MemoryCategory::data);
  d.images = Tensor::empty({n, c, h, w}, DType::f32);
  if (std::isnan(mean)) {  // this set's own statistics, rounded to 4 decimals (as torchvision's published ones)
    std::array<std::uint64_t, 256> counts{};
    for (const std::uint8_t v : images.data) ++counts[v];
    double sum = 0, squares = 0;
    for (std::size_t v = 0; v < counts.size(); ++v) {
      const double x = static_cast<double>(v) / 255.0, k = static_cast<double>(counts[v]);
      sum += k * x;
      squares += k * x * x;
    }
    const double count = static_cast<double>(images.data.size());
    const double m = sum / count, sd = std::sqrt(std::max(0.0, squares / count - m * m));
    mean = std::round(m * 1e4) / 1e4;
    stddev = std::round(sd * 1e4) / 1e4;
    if (stddev == 0) stddev = 1;  // every pixel alike: centred only
  }
  if (!(stddev > 0) || !std::isfinite(stddev) || !std::isfinite(mean)) {
    throw std::invalid_argument("image normalization: the standard deviation must be positive and both finite");
  }
  d.mean = mean;
  d.stddev = stddev;
  float* px = d.images.data_as<float>();
  const auto scale = static_cast<float>(1.0 / (255.0 * stddev));
  const auto shift = static_cast<float>(mean / stddev);
  for (std::size_t i = 0; i < images.data.size(); ++i) px[i] = static_cast<float>(images.data[i]) * scale - shift;
  d.labels.assign(labels.data.begin(), labels.data.end());
  d.classes = *std::max_element(labels.data.begin(), labels.data.end()) + 1;
  return d;
}

Tensor gather_rows(const Tensor& source, std::span<const std::int64_t> indices) {
  if (!source.is_contiguous()) throw std::invalid_argument("gather_rows: the source must be contiguous");
  Shape shape = source.shape();
  const std::int64_t rows = shape[0];
  const std::size_t row_bytes = static_cast<std::size_t>(source.numel() / std::max<std::int64_t>(rows, 1)) * dtype_size(source.dtype());
  shape[0] = static_cast<std::int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, source.dtype(), source.device());
  const auto* src = static_cast<const char*>(source.data());
  auto* dst = static_cast<char*>(out.data());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= rows) throw std::out_of_range("gather_rows: index out of range");
    std::memcpy(dst + i * row_bytes, src + static_cast<std::size_t>(indices[i]) * row_bytes, row_bytes);
  }
  return out;
}

BatchOrder::BatchOrder(std::int64_t n, std::int64_t batch, std::uint64_t seed, bool shuffle)
    : n_(n), batch_(batch), seed_(seed), shuffle_(shuffle) {
  if (n <= 0 || batch <= 0) throw std::invalid_argument("batch order: need items and a positive batch size");
  reshuffle();
}

void BatchOrder::reshuffle() {
  order_.resize(static_cast<std::size_t>(n_));
  for (std::int64_t i = 0; i < n_; ++i) order_[static_cast<std::size_t>(i)] = i;
  if (!shuffle_) return;
  // Fisher-Yates from a generator seeded by (seed, epoch): the same order everywhere.
  std::mt19937_64 rng(seed_ ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(epoch_ + 1)));
  for (std::int64_t i = n_ - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
  }
}

std::vector<std::int64_t> BatchOrder::next() {
  if (position_ >= n_) {
    ++epoch_;
    position_ = 0;
    reshuffle();
  }
  const std::int64_t end = std::min(n_, position_ + batch_);
  std::vector<std::int64_t> batch(order_.begin() + position_, order_.begin() + end);
  position_ = end;
  return batch;
}

void BatchOrder::seek(std::int64_t epoch, std::int64_t position) {
  if (epoch < 0 || position < 0 || position > n_) throw std::invalid_argument("batch order: position out of range");
  epoch_ = epoch;
  position_ = position;
  reshuffle();
}

TextCorpus TextCorpus::load(const std::filesystem::path& path, double validation_fraction) try {
  std::vector<std::uint8_t> all;
  if (std::filesystem::is_directory(path)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    // The sizes first, so that a directory past the limit is refused before anything is read.
    std::uint64_t budget = kMaxTextBytes;
    for (const auto& f : files) {
      try {
        budget -= InputFile(f, kTextKind, budget).size();
      } catch (const InputFileError& e) {
        throw DataError(e.what());
      }
    }
    budget = kMaxTextBytes;
    for (const auto& f : files) {
      const std::vector<std::uint8_t> b = read_bytes(f, budget);
      all.insert(all.end(), b.begin(), b.end());
    }
  } else if (std::filesystem::exists(path)) {
    std::uint64_t budget = kMaxTextBytes;
    all = read_bytes(path, budget);
  } else {
    throw DataError(path.string() + ": no such file or directory");
  }
  return split(std::move(all), path.string(), validation_fraction);
} catch (...) {
  rethrow_as<DataError>(path.string());
}

TextCorpus TextCorpus::from_bytes(std::vector<std::uint8_t> bytes, const std::string& where, double validation_fraction) {
  check_text(bytes, where);
  return split(std::move(bytes), where, validation_fraction);
}

TextCorpus TextCorpus::split(std::vector<std::uint8_t> all, const std::string& where, double validation_fraction) {
  if (all.size() < 1024) {
    throw DataError(where + ": only " + std::to_string(all.size()) + " bytes of text (need at least 1024)");
  }
  if (!(validation_fraction > 0 && validation_fraction < 1)) {
    throw std::invalid_argument("text corpus: the validation fraction must be in (0, 1)");
  }
  TextCorpus c;
  const auto split = static_cast<std::size_t>(static_cast<double>(all.size()) * (1 - validation_fraction));
  c.train.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(split));
  c.validation.assign(all.begin() + static_cast<std::ptrdiff_t>(split), all.end());
  return c;
}

void TextCorpus::sample(std::span<const std::uint8_t> bytes, std::int64_t batch, std::int64_t block,
                        std::mt19937_64& rng, std::vector<std::int64_t>& inputs, std::vector<std::int64_t>& targets) {
  if (static_cast<std::int64_t>(bytes.size()) <= block + 1) {
    throw std::invalid_argument("text corpus: the text is shorter than one block");
  }
  inputs.resize(static_cast<std::size_t>(batch * block));
  targets.resize(static_cast<std::size_t>(batch * block));
  const auto span = static_cast<std::uint64_t>(bytes.size()) - static_cast<std::uint64_t>(block) - 1;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto start = static_cast<std::size_t>(rng() % (span + 1));
    for (std::int64_t t = 0; t < block; ++t) {
      inputs[static_cast<std::size_t>(b * block + t)] = bytes[start + static_cast<std::size_t>(t)];
      targets[static_cast<std::size_t>(b * block + t)] = bytes[start + static_cast<std::size_t>(t) + 1];
    }
  }
}

}  // namespace mantissa
