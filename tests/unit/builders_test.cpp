// Models and data by name (mantissa/train/builders.h), the one way every command builds them: each name
// gives the model its sizes and data say, bad data is refused naming the directory, and no command
// builds a model or loads a data set another way (a source scan).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "mantissa/nn/models.h"
#include "mantissa/train/builders.h"
#include "source_scan.h"

namespace mantissa::train {
namespace {

namespace fs = std::filesystem;

// name -> shape of every parameter.
std::map<std::string, Shape> parameter_shapes(const nn::Module& m) {
  std::map<std::string, Shape> out;
  for (const auto& [name, p] : m.named_parameters()) out[name] = p.shape();
  return out;
}

TEST(Builders, EachModelTakesItsSizesFromTheFlagsAndTheData) {
  const Dataset images = load_dataset("cnn", "");
  EXPECT_EQ(images.path, kFashionMnistDir.string());
  const DataShape shape = data_shape("cnn", images);
  EXPECT_EQ(shape.input(), "1x28x28");
  EXPECT_EQ(shape.classes, 10);
  EXPECT_EQ(data_shape("segment", images).classes, 11);  // and the background
  const ModelSizes sizes{.hidden = 24, .layers = 3, .width = 6, .n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16,
                         .vocab = 100, .gelu_tanh = true, .embd = 8};
  EXPECT_EQ(parameter_shapes(make_model("mlp", sizes, shape, 5)->module()),
            parameter_shapes(nn::Mlp(nn::MlpConfig{.in = 784, .hidden = 24, .layers = 3, .classes = 10, .seed = 5})));
  EXPECT_EQ(parameter_shapes(make_model("cnn", sizes, shape, 5)->module()),
            parameter_shapes(nn::Cnn(nn::CnnConfig{.in_channels = 1, .width = 6, .classes = 10, .seed = 5})));
  EXPECT_EQ(parameter_shapes(make_model("gpt", sizes, {}, 5)->module()),
            parameter_shapes(nn::Gpt(nn::GptConfig{2, 2, 32, 16, 100, 5, true})));
  EXPECT_EQ(parameter_shapes(make_model("lstm", sizes, {}, 5)->module()),
            parameter_shapes(nn::LstmLm(nn::LstmConfig{.vocab = 256, .embd = 8, .hidden = 24, .layers = 3, .seed = 5})));
  // The same seed draws the same weights.
  const auto a = make_model("mlp", sizes, shape, 5), b = make_model("mlp", sizes, shape, 5);
  EXPECT_EQ(a->module().parameters().front().to_doubles(), b->module().parameters().front().to_doubles());

  const Dataset text = load_dataset("gpt", "");
  ASSERT_TRUE(text.text.has_value());
  EXPECT_EQ(text.path, kFortunesDir.string());
  const auto source = make_source("gpt", text, {.batch_size = 3, .window = 16, .eval_batches = 2, .seed = 1});
  const Batch batch = source->next();
  EXPECT_EQ(batch.tokens.size(), 3U * 16U);
  EXPECT_EQ(source->item_unit(), "tokens");
  const auto streams = make_source("lstm", text, {.batch_size = 3, .window = 8, .eval_batches = 2, .seed = 1});
  EXPECT_EQ(streams->next().tokens.size(), 3U * 8U);
  EXPECT_EQ(make_source("cnn", images, {.batch_size = 4, .seed = 1})->next().inputs.shape(), (Shape{4, 1, 28, 28}));

  try {
    make_model("resnet", sizes, shape, 0);
    FAIL() << "no error for a model that does not exist";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "'resnet' is no model (mlp, cnn, segment, gpt, lstm)");
  }
  EXPECT_THROW(load_dataset("resnet", ""), std::invalid_argument);
}

// An MNIST-layout directory whose training and test images are h x w and th x tw pixels.
fs::path image_dir(const std::string& name, std::int64_t h, std::int64_t w, std::int64_t th, std::int64_t tw) {
  const fs::path d = fs::temp_directory_path() / ("mantissa_builders_test_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  const auto write = [&](const char* split, std::int64_t rows, std::int64_t cols) {
    IdxArray images{{4, rows, cols}, std::vector<std::uint8_t>(static_cast<std::size_t>(4 * rows * cols))};
    for (std::size_t i = 0; i < images.data.size(); ++i) images.data[i] = static_cast<std::uint8_t>(i * 37);
    write_idx(d / (std::string(split) + "-images-idx3-ubyte"), images);
    write_idx(d / (std::string(split) + "-labels-idx1-ubyte"), IdxArray{{4}, {0, 1, 2, 1}});
  };
  write("train", h, w);
  write("t10k", th, tw);
  return d;
}

void expect_data_error(const std::function<void()>& f, const std::string& path, const std::string& fragment) {
  try {
    f();
    FAIL() << "no error: " << fragment;
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

TEST(Builders, ImageDataTheModelCannotTakeIsRefusedNamingTheDirectory) {
  const fs::path mixed = image_dir("mixed", 8, 8, 6, 8);
  const Dataset d = load_dataset("mlp", mixed.string());
  expect_data_error([&] { data_shape("mlp", d); }, mixed.string(), "the test images are [4, 1, 6, 8], the training images [4, 1, 8, 8]");
  const fs::path tiny = image_dir("tiny", 3, 8, 3, 8);
  const Dataset t = load_dataset("cnn", tiny.string());
  expect_data_error([&] { data_shape("cnn", t); }, tiny.string(), "the CNN needs images of at least 4x4 pixels");
  EXPECT_EQ(data_shape("mlp", t).input(), "1x3x8");  // the MLP takes any size
  EXPECT_EQ(data_shape("mlp", t).classes, 3);
  fs::remove_all(mixed.parent_path());
}

TEST(Builders, NoCommandBuildsAModelOrLoadsADataSetAnotherWay) {
  // (trainer.h shows ModuleModel in its usage comment.)
  const std::set<std::string> home = {"src/train/builders.cpp", "include/mantissa/train/model.h", "src/data/datasets.cpp",
                                      "include/mantissa/data/datasets.h", "include/mantissa/train/trainer.h"};
  const testing::SourceScan scan = testing::scan_sources({"ModuleModel", "RecurrentModel", "load_mnist_format"}, false, home);
  EXPECT_GT(scan.files, 100);
  for (const std::string& m : scan.matches) ADD_FAILURE() << m << " (build models and data through train/builders.h)";
}

}  // namespace
}  // namespace mantissa::train
