// Models and their data by name; see mantissa/train/builders.h.
#include "mantissa/train/builders.h"

#include <stdexcept>

#include "mantissa/core/memory.h"
#include "mantissa/nn/models.h"

namespace mantissa::train {

bool is_text_model(std::string_view model) {
  if (model == "gpt" || model == "lstm") return true;
  if (model == "mlp" || model == "cnn" || model == "segment") return false;
  throw std::invalid_argument("'" + std::string(model) + "' is no model (mlp, cnn, segment, gpt, lstm)");
}

Dataset load_dataset(std::string_view model, const std::string& path, double mean, double stddev) {
  Dataset d;
  const bool text = is_text_model(model);
  d.path = !path.empty() ? path : text ? kFortunesDir.string() : kFashionMnistDir.string();
  if (text) {
    d.text = TextCorpus::load(d.path);
  } else {
    // Normalized by the training set's own pixel statistics, the test set by the same.
    d.train = load_mnist_format(d.path, true, mean, stddev);
    d.test = load_mnist_format(d.path, false, d.train->mean, d.train->stddev);
  }
  return d;
}

Dataset load_image_files(const ImageFiles& f, double mean, double stddev) {
  Dataset d;
  d.path = f.train_images;
  d.train = image_dataset(read_array(f.train_images), read_array(f.train_labels), f.train_images, f.train_labels, mean, stddev);
  d.test = image_dataset(read_array(f.test_images), read_array(f.test_labels), f.test_images, f.test_labels, d.train->mean, d.train->stddev);
  return d;
}

Dataset image_dataset_in_memory(const IdxArray& train_images, const IdxArray& train_labels, const IdxArray& test_images,
                                const IdxArray& test_labels, const std::string& name, double mean, double stddev) {
  Dataset d;
  d.path = name;
  d.train = image_dataset(train_images, train_labels, name + ": training images", name + ": training labels", mean, stddev);
  d.test = image_dataset(test_images, test_labels, name + ": test images", name + ": test labels", d.train->mean, d.train->stddev);
  return d;
}

Dataset text_dataset_in_memory(std::vector<std::uint8_t> text, const std::string& name) {
  Dataset d;
  d.path = name;
  d.text = TextCorpus::from_bytes(std::move(text), name);
  return d;
}

std::string DataShape::input() const {
  return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
}

DataShape data_shape(std::string_view model, const Dataset& data) {
  if (!data.train || !data.test) return {};
  const ImageDataset &train = *data.train, &test = *data.test;
  if (test.channels() != train.channels() || test.height() != train.height() || test.width() != train.width()) {
    throw DataError(data.path + ": the test images are " + shape_str(test.images.shape()) + ", the training images " +
                    shape_str(train.images.shape()) + " (each image must have the same size)");
  }
  DataShape s{train.channels(), train.height(), train.width(), std::max(train.classes, test.classes)};
  // The CNN pools twice by 2: a side under 4 pixels would leave nothing to pool.
  if (model == "cnn" && (s.height < 4 || s.width < 4)) {
    throw DataError(data.path + ": the CNN needs images of at least 4x4 pixels (it pools twice by 2); these are " +
                    std::to_string(s.height) + "x" + std::to_string(s.width));
  }
  if (model == "segment") s.classes += 1;  // background
  return s;
}

std::unique_ptr<DataSource> make_source(std::string_view model, Dataset data, const SourceOptions& o) {
  if (is_text_model(model)) {
    if (!data.text) throw std::invalid_argument("make_source: a text model needs a text corpus");
    if (model == "lstm") return std::make_unique<TextStreams>(std::move(*data.text), o.batch_size, o.window, o.eval_batches, data.path);
    return std::make_unique<TextData>(std::move(*data.text), o.batch_size, o.window, o.seed, o.eval_batches, data.path);
  }
  if (!data.train || !data.test) throw std::invalid_argument("make_source: an image model needs training and test images");
  if (model == "segment") {
    // Object pixels: brighter than 0.2 of full scale, under the images' normalization.
    const double object = (0.2 - data.train->mean) / data.train->stddev;
    return std::make_unique<SegmentationData>(std::move(*data.train), std::move(*data.test), o.batch_size, o.seed, object);
  }
  return std::make_unique<ClassificationData>(std::move(*data.train), std::move(*data.test), o.batch_size, o.seed);
}

std::unique_ptr<Model> make_model(std::string_view model, const ModelSizes& z, const DataShape& shape, std::uint64_t seed) {
  MemoryCategoryScope params(MemoryCategory::parameters);
  if (model == "mlp") {
    return std::make_unique<ModuleModel<nn::Mlp>>(nn::MlpConfig{.in = shape.channels * shape.height * shape.width,
                                                                .hidden = z.hidden,
                                                                .layers = z.layers,
                                                                .classes = shape.classes,
                                                                .seed = seed});
  }
  if (model == "cnn") {
    return std::make_unique<ModuleModel<nn::Cnn>>(
        nn::CnnConfig{.in_channels = shape.channels, .width = z.width, .classes = shape.classes, .seed = seed});
  }
  if (model == "segment") {
    return std::make_unique<ModuleModel<nn::Segmenter>>(
        nn::SegmenterConfig{.in_channels = shape.channels, .width = z.width, .classes = shape.classes, .seed = seed});
  }
  if (model == "lstm") {
    return std::make_unique<RecurrentModel<nn::LstmLm>>(
        nn::LstmConfig{.vocab = 256, .embd = z.embd, .hidden = z.hidden, .layers = z.layers, .seed = seed});
  }
  if (model == "gpt") {
    return std::make_unique<ModuleModel<nn::Gpt>>(
        nn::GptConfig{z.n_layer, z.n_head, z.n_embd, z.block_size, z.vocab, seed, z.gelu_tanh});
  }
  is_text_model(model);  // throws: no such model
  return nullptr;
}

}  // namespace mantissa::train
