// Models and their data by name, built one way for every command: `mantissa train`, `compare` and
// `paper` (through the command's training run), `bench --model`, and a program of one's own. A name is
// one of "mlp", "cnn", "segment" (image models, trained on a directory of MNIST-format files), "gpt" and
// "lstm" (text models, trained on a text corpus).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "mantissa/data/datasets.h"
#include "mantissa/train/data.h"
#include "mantissa/train/model.h"

namespace mantissa::train {

// Whether the model trains on text (gpt, lstm); throws std::invalid_argument for a name that is no model.
bool is_text_model(std::string_view model);

// A data set loaded from disk: the text corpus for a text model, the training and test images for an
// image model.
struct Dataset {
  std::string path;
  std::optional<TextCorpus> text;
  std::optional<ImageDataset> train, test;
};
// Loads the data `model` trains on from `path` (empty: the fortunes for text models, Fashion-MNIST for
// image models); images normalized by the training set's pixel mean and standard deviation (rounded to 4
// decimals; ImageDataset::mean/stddev say which). Throws DataError for missing or malformed data.
// `mean` and `stddev`, where given, replace the training set's own.
Dataset load_dataset(std::string_view model, const std::string& path, double mean = kOwnStatistics, double stddev = kOwnStatistics);
// An image set file by file (each IDX, gzipped or not, or .npy: read_array), normalized as load_dataset's.
struct ImageFiles {
  std::string train_images, train_labels, test_images, test_labels;
};
Dataset load_image_files(const ImageFiles& files, double mean = kOwnStatistics, double stddev = kOwnStatistics);

// The same from memory (the Python module's arrays), named `name` in errors and summaries: training and
// test images with their labels (pixels 0..255, normalized as load_dataset() normalizes files), or text.
Dataset image_dataset_in_memory(const IdxArray& train_images, const IdxArray& train_labels, const IdxArray& test_images,
                                const IdxArray& test_labels, const std::string& name, double mean = kOwnStatistics,
                                double stddev = kOwnStatistics);
Dataset text_dataset_in_memory(std::vector<std::uint8_t> text, const std::string& name);

// The sizes a model takes from its data: image channels, height, width and classes (the largest label of
// either split + 1, and the background for the segmenter); all 0 for text (a 256-byte vocabulary).
struct DataShape {
  std::int64_t channels = 0, height = 0, width = 0, classes = 0;
  std::string input() const;  // "1x28x28"
};
// Throws DataError when the test images differ in size from the training images, or are too small for
// the CNN's two poolings.
DataShape data_shape(std::string_view model, const Dataset& data);

// How the batches are drawn: rows per batch, the text models' window (gpt: block_size, lstm: bptt), the
// evaluation batches of a text model, the seed of the order.
struct SourceOptions {
  std::int64_t batch_size = 128;
  std::int64_t window = 128;
  std::int64_t eval_batches = 20;
  std::uint64_t seed = 0;
};
// The data source `model` trains from (it takes the data set over: pass a copy to keep one).
std::unique_ptr<DataSource> make_source(std::string_view model, Dataset data, const SourceOptions& options);

// A model's sizes; each model reads its own.
struct ModelSizes {
  std::int64_t hidden = 256, layers = 2;  // mlp (hidden layers), lstm
  std::int64_t width = 32;                // cnn, segment: the first convolution's channels
  std::int64_t n_layer = 4, n_head = 4, n_embd = 256, block_size = 128, vocab = 256;  // gpt
  bool gelu_tanh = false;                 // gpt: GPT-2's tanh GELU instead of the erf form
  std::int64_t embd = 64;                 // lstm
};
// The model named, sized by `sizes` and (image models) the data's shape, its weights drawn from `seed`;
// its parameters are counted as MemoryCategory::parameters.
std::unique_ptr<Model> make_model(std::string_view model, const ModelSizes& sizes, const DataShape& shape, std::uint64_t seed);

}  // namespace mantissa::train
