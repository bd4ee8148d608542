// Data: IDX files (the MNIST format, gzipped or not), image classification sets built from them, a
// seeded batch order, and byte-level text corpora. Every read error names the file and what is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/base/errors.h"
#include "mantissa/core/tensor.h"

namespace mantissa {

// A data file that is missing, unreadable or malformed: "PATH: what is wrong".
class DataError : public Error {
 public:
  using Error::Error;
};

// An IDX array of unsigned bytes (type 0x08), the type MNIST and Fashion-MNIST use.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};
IdxArray read_idx(const std::filesystem::path& path);
// Writes one (gzipped when the name ends in .gz), for tests and tools.
void write_idx(const std::filesystem::path& path, const IdxArray& array);
// A NumPy .npy file (numpy.save) of unsigned bytes, or of integers of any width each 0..255 (labels),
// little-endian, C order, 1 to 4 dimensions.
IdxArray read_npy(const std::filesystem::path& path);
// An array file of either kind, told by its first bytes: .npy, else IDX (gzipped or not). What every
// image and label file goes through.
IdxArray read_array(const std::filesystem::path& path);

// Images [N, C, H, W] as f32, scaled to [0, 1] then normalized with the given mean and standard
// deviation, and one label per image. `classes` is the largest label + 1 (IDX files carry no count).
struct ImageDataset {
  Tensor images;
  std::vector<std::int64_t> labels;
  std::int64_t classes = 0;
  double mean = 0, stddev = 1;  // the normalization applied: (pixel / 255 - mean) / stddev
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  std::int64_t channels() const { return images.size(1); }
  std::int64_t height() const { return images.size(2); }
  std::int64_t width() const { return images.size(3); }
};

// The MNIST layout in `dir`: {train,t10k}-images-idx3-ubyte[.gz] and the matching labels, or any of the
// usual names of them (the split, train or t10k/test, and the part, images or labels, as words of the
// name with an idx word: train-images.idx3-ubyte, emnist-digits-test-labels-idx1-ubyte.gz), or NumPy
// pairs (train_images.npy, test_labels.npy; x_train.npy, y_test.npy as Keras saves them). Images of any
// size: [N, H, W] (one channel, as MNIST) or [N, C, H, W] in the images file; labels 0..255.
// Fashion-MNIST's pixel mean and standard deviation (training set) are the defaults; kOwnStatistics
// normalizes by this file's own, rounded to 4 decimals (which for Fashion-MNIST's training set are those).
inline constexpr double kOwnStatistics = std::numeric_limits<double>::quiet_NaN();
ImageDataset load_mnist_format(const std::filesystem::path& dir, bool train, double mean = 0.2860,
                               double stddev = 0.3530);
// The same from arrays in memory (an IDX file's, or a program's: the Python module's NumPy arrays), named
// in errors as `image_name` and `label_name`: images [N, H, W] or [N, C, H, W] of pixels 0..255, labels [N].
ImageDataset image_dataset(const IdxArray& images, const IdxArray& labels, const std::string& image_name,
                           const std::string& label_name, double mean = kOwnStatistics, double stddev = kOwnStatistics);
inline const std::filesystem::path kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Rows `indices` of a contiguous tensor (first dimension), copied into a new tensor.
Tensor gather_rows(const Tensor& source, std::span<const std::int64_t> indices);

// Batches of indices into a data set of n items, reshuffled every epoch from (seed, epoch): the same
// seed gives the same order on every machine. Its position can be saved and restored.
class BatchOrder {
 public:
  BatchOrder(std::int64_t n, std::int64_t batch, std::uint64_t seed, bool shuffle = true);
  // The next batch's indices (the last batch of an epoch may be shorter; drop_last skips it).
  std::vector<std::int64_t> next();
  std::int64_t epoch() const { return epoch_; }
  std::int64_t position() const { return position_; }
  void seek(std::int64_t epoch, std::int64_t position);

 private:
  void reshuffle();
  std::int64_t n_, batch_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t epoch_ = 0, position_ = 0;
  std::vector<std::int64_t> order_;
};

// A byte-level text corpus (vocabulary 256): a file, or every fortune-style text file of a directory
// (sorted by name; index files *.dat and duplicates *.u8 skipped), split into training and validation.
struct TextCorpus {
  std::vector<std::uint8_t> train, validation;
  static TextCorpus load(const std::filesystem::path& path, double validation_fraction = 0.1);
  // The same from bytes in memory, named `where` in errors; refused as load() refuses a file that is
  // compressed or binary data.
  static TextCorpus from_bytes(std::vector<std::uint8_t> bytes, const std::string& where, double validation_fraction = 0.1);
  // `batch` windows of block + 1 bytes starting at offsets drawn from rng: inputs [batch, block] and
  // next-byte targets, both as token ids.
  static void sample(std::span<const std::uint8_t> bytes, std::int64_t batch, std::int64_t block, std::mt19937_64& rng,
                     std::vector<std::int64_t>& inputs, std::vector<std::int64_t>& targets);

 private:
  // The last validation_fraction of the bytes held out (at least 1024 bytes in all).
  static TextCorpus split(std::vector<std::uint8_t> all, const std::string& where, double validation_fraction);
};
inline const std::filesystem::path kFortunesDir = "/usr/share/games/fortunes";

}  // namespace mantissa
