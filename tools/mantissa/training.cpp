// The training loop behind `mantissa train`: data, model, precision (autocast or low-precision model),
// loss scaling, optimizer and schedule, evaluation, telemetry.
#include "training.h"

#include "checkpoint.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/amp/autocast.h"
#include "mantissa/amp/step.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/data/datasets.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/nn/models.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa::cli {
namespace {

LossScalerOptions scaler_options(const TrainConfig& c) {
  LossScalerOptions o = LossScalerOptions::for_compute(c.precision);
  const std::string& s = c.loss_scale;
  if (s.empty()) {
    // the precision's default kind, with the flags' parameters
  } else if (s == "dynamic") {
    o.kind = LossScaling::dynamic;
  } else if (s == "deepspeed") {
    LossScalerOptions d = LossScalerOptions::deepspeed();  // DeepSpeed's defaults, whatever the scaling flags say
    d.compute = c.precision;
    return d;
  } else if (s == "none") {
    o.kind = LossScaling::none;
  } else if (s.rfind("static:", 0) == 0) {
    o.kind = LossScaling::fixed;
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s.substr(7), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() - 7 || !(v > 0) || !(v <= std::numeric_limits<float>::max())) {
      throw std::invalid_argument("--loss-scale: '" + s + "' is not static:N with N a positive number finite in f32");
    }
    o.init_scale = v;
    return o;
  } else {
    throw std::invalid_argument("--loss-scale: '" + s + "' is not dynamic, deepspeed, static:N or none");
  }
  if (o.kind == LossScaling::dynamic) {
    o.init_scale = c.init_scale;
    o.growth_factor = c.growth_factor;
    o.backoff_factor = c.backoff_factor;
    o.growth_interval = c.growth_interval;
    o.hysteresis = c.hysteresis;
    o.min_scale = c.min_scale;
  }
  return o;
}


// The loss scaling a run uses, in words, for the resume check.
std::string loss_scale_name(const LossScalerOptions& o) {
  switch (o.kind) {
    case LossScaling::none: return "none";
    case LossScaling::fixed: return "static:" + exact_number(o.init_scale);
    case LossScaling::dynamic: break;
  }
  return "dynamic(init " + exact_number(o.init_scale) + ", growth " + exact_number(o.growth_factor) + " every " +
         std::to_string(o.growth_interval) + ", backoff " + exact_number(o.backoff_factor) + ", hysteresis " +
         std::to_string(o.hysteresis) + ", floor " + exact_number(o.min_scale) + ")";
}

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  const MasterWeightOptions master{true, c.stochastic_rounding ? Rounding::stochastic : Rounding::nearest_even,
                                   c.seed + 17, false};
  if (c.optimizer == "adamw" || c.optimizer == "adam") {
    return std::make_unique<Adam>(std::move(params),
                                  AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay, .master = master},
                                  c.optimizer == "adamw");
  }
  if (c.optimizer == "sgd") {
    return std::make_unique<Sgd>(std::move(params), SgdOptions{.lr = c.lr, .momentum = c.momentum,
                                                               .weight_decay = c.weight_decay, .master = master});
  }
  throw std::invalid_argument("--optimizer: '" + c.optimizer + "' is not adamw, adam or sgd");
}

// Every setting in its range, so that no value is silently wrong or crashes the run later: counts within
// bounds that cannot overflow (a value past the type's range saturates when parsed, so the bounds also
// catch those), finite real numbers.
void check(const TrainConfig& c) {
  const auto in_range = [](std::int64_t v, std::int64_t lo, std::int64_t hi, const char* flag) {
    if (v < lo || v > hi) {
      throw std::invalid_argument(std::string(flag) + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                                  ", got " + std::to_string(v));
    }
  };
  constexpr std::int64_t kMaxSteps = 1'000'000'000'000;  // 10^12: beyond any run, far from overflowing
  constexpr std::int64_t kMaxSize = 1 << 20;
  in_range(c.steps, 1, kMaxSteps, "--steps");
  in_range(c.epochs, 0, 1'000'000, "--epochs");
  in_range(c.batch_size, 1, kMaxSize, "--batch-size");
  in_range(c.grad_accum, 1, kMaxSize, "--grad-accum");
  in_range(c.eval_every, 1, kMaxSteps, "--eval-every");
  in_range(c.eval_batches, 1, kMaxSize, "--eval-batches");
  in_range(c.checkpoint_every, 0, kMaxSteps, "--checkpoint-every");
  in_range(c.keep, 1, 1 << 20, "--keep");
  in_range(c.threads, 0, 4096, "--threads");
  in_range(c.warmup, 0, kMaxSteps, "--warmup");
  in_range(c.hidden, 1, 1 << 16, "--hidden");
  in_range(c.layers, 0, 1024, "--layers");
  in_range(c.width, 1, 1 << 14, "--width");
  in_range(c.n_layer, 1, 1024, "--n-layer");
  in_range(c.n_head, 1, 1 << 12, "--n-head");
  in_range(c.n_embd, 1, 1 << 16, "--n-embd");
  in_range(c.block_size, 1, 1 << 16, "--block-size");
  if (c.n_embd % c.n_head != 0) {
    throw std::invalid_argument("--n-embd " + std::to_string(c.n_embd) + " is not a multiple of --n-head " +
                                std::to_string(c.n_head));
  }
  in_range(c.growth_interval, 1, kMaxSteps, "--growth-interval");
  in_range(c.hysteresis, 1, 1 << 20, "--hysteresis");
  const auto real = [](double v, bool ok, const char* flag, const char* what) {
    if (!std::isfinite(v) || !ok) throw std::invalid_argument(std::string(flag) + " must be " + what + ", got " + exact_number(v));
  };
  real(c.lr, c.lr > 0, "--lr", "a finite positive number");
  real(c.weight_decay, c.weight_decay >= 0, "--weight-decay", "finite and at least 0");
  real(c.momentum, c.momentum >= 0 && c.momentum < 1, "--momentum", "in [0, 1)");
  real(c.clip, c.clip >= 0, "--clip", "finite and at least 0 (0: no clipping)");
  real(c.init_scale, c.init_scale > 0 && c.init_scale <= std::numeric_limits<float>::max(), "--init-scale",
       "positive and finite in f32");
  real(c.growth_factor, c.growth_factor > 1, "--growth-factor", "above 1");
  real(c.backoff_factor, c.backoff_factor > 0 && c.backoff_factor < 1, "--backoff-factor", "in (0, 1)");
  real(c.min_scale, c.min_scale >= 0 && c.min_scale <= std::numeric_limits<float>::max(), "--min-scale",
       "finite and at least 0");
  if (c.model != "mlp" && c.model != "cnn" && c.model != "gpt") {
    throw std::invalid_argument("--model: '" + c.model + "' is not mlp, cnn or gpt");
  }
  if (c.precision != DType::f32 && c.precision != DType::bf16 && c.precision != DType::f16) {
    throw std::invalid_argument("--precision must be fp32, bf16 or fp16");
  }
  if (c.low_precision_model && c.precision == DType::f32) {
    throw std::invalid_argument("--mode low-precision-model needs --precision bf16 or fp16");
  }
  if (c.schedule != "cosine" && c.schedule != "constant") {
    throw std::invalid_argument("--schedule: '" + c.schedule + "' is not cosine or constant");
  }
  scaler_options(c);  // --loss-scale's own checks
}

// Writes an inf into the first element of a gradient, in its dtype.
void inject_inf(const Tensor& g) {
  if (g.dtype() == DType::f32) {
    g.data_as<float>()[0] = std::numeric_limits<float>::infinity();
  } else {
    g.data_as<std::uint16_t>()[0] =
        static_cast<std::uint16_t>(encode(format_of(g.dtype()), std::numeric_limits<float>::infinity()));
  }
}

// The sizes a model takes from its data: image channels, height and width and the class count (the
// largest label of either split + 1), or the GPT's 256-byte vocabulary.
struct DataShape {
  std::int64_t channels = 0, height = 0, width = 0, classes = 0;
  std::string input() const {
    return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
  }
};

DataShape image_shape(const ImageDataset& train, const ImageDataset& test, const std::string& dir) {
  if (test.channels() != train.channels() || test.height() != train.height() || test.width() != train.width()) {
    throw DataError(dir + ": the test images are " + shape_str(test.images.shape()) + ", the training images " +
                    shape_str(train.images.shape()) + " (each image must have the same size)");
  }
  return {train.channels(), train.height(), train.width(), std::max(train.classes, test.classes)};
}

// What a checkpoint must agree on with the run resuming from it, as (name, value): the flags that shape
// the model, its precision and its data order, and the sizes taken from the data.
using Signature = std::vector<std::pair<std::string, std::string>>;

Signature signature(const TrainConfig& c, const DataShape& d) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  Signature s{{"--model", c.model}, {"--precision", std::string(dtype_name(c.precision))},
              {"--mode", c.low_precision_model ? "low-precision-model" : "autocast"}, {"--optimizer", c.optimizer}};
  if (c.model == "gpt") {
    s.insert(s.end(), {{"--n-layer", n(c.n_layer)}, {"--n-head", n(c.n_head)}, {"--n-embd", n(c.n_embd)},
                       {"--block-size", n(c.block_size)}, {"vocabulary", "256"}});
  } else {
    if (c.model == "mlp") s.insert(s.end(), {{"--hidden", n(c.hidden)}, {"--layers", n(c.layers)}});
    if (c.model == "cnn") s.emplace_back("--width", n(c.width));
    s.insert(s.end(), {{"image size (CxHxW)", d.input()}, {"classes", n(d.classes)}});
  }
  s.insert(s.end(), {{"--batch-size", n(c.batch_size)}, {"--seed", std::to_string(c.seed)}});
  // Settings a run may change on resume on purpose (--resume-allow): what the optimizer, the schedule
  // and the loss scaler do from here on.
  const auto x = [](double v) { return exact_number(v); };
  const LossScalerOptions o = scaler_options(c);
  s.insert(s.end(), {{"--lr", x(c.lr)}, {"--schedule", c.schedule}, {"--warmup", n(c.warmup)},
                     {"--weight-decay", x(c.weight_decay)}, {"--momentum", x(c.momentum)}, {"--clip", x(c.clip)},
                     {"--grad-accum", n(c.grad_accum)}, {"--stochastic-rounding", c.stochastic_rounding ? "on" : "off"},
                     {"--loss-scale", loss_scale_name(o)}});
  return s;
}

// The settings --resume-allow may name.
bool changeable_on_resume(const std::string& key) {
  for (const char* k : {"--lr", "--schedule", "--warmup", "--weight-decay", "--momentum", "--clip", "--grad-accum",
                        "--stochastic-rounding", "--loss-scale"}) {
    if (key == k) return true;
  }
  return false;
}

std::string signature_json(const Signature& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : s) j[k] = v;
  return j.dump();
}

// Throws naming every setting where the checkpoint's run and this one differ, except those allowed.
void check_signature(const std::filesystem::path& path, const std::string& stored, const Signature& ours,
                     const std::vector<std::string>& allowed) {
  nlohmann::json theirs;
  try {
    theirs = nlohmann::json::parse(stored);
  } catch (const nlohmann::json::exception&) {
  }
  if (!theirs.is_object()) {
    throw CheckpointError(path.string() + ": written by another version of mantissa (its settings: " + stored + ")");
  }
  std::string diff;
  for (const auto& [k, v] : ours) {
    const auto it = theirs.find(k);
    const std::string was = it != theirs.end() && it->is_string() ? it->get<std::string>() : "(none)";
    const bool allow = std::find(allowed.begin(), allowed.end(), k.substr(2)) != allowed.end();
    if (was != v && !allow) diff += (diff.empty() ? "" : ", ") + k + " " + was + " (this run: " + v + ")";
  }
  if (!diff.empty()) {
    throw CheckpointError(path.string() + ": written by a run with " + diff +
                          " (--resume-allow NAME,... accepts a changed --lr, --schedule, --warmup, --weight-decay, "
                          "--momentum, --clip, --grad-accum, --stochastic-rounding or --loss-scale)");
  }
}

// Every setting of the run, for the checkpoint's metadata (people and tools read it; resume checks the
// signature above).
std::string config_json(const TrainConfig& c, const DataShape& d) {
  return nlohmann::json{{"model", c.model}, {"channels", d.channels}, {"height", d.height}, {"width", d.width},
                        {"classes", d.classes}, {"data", c.data}, {"precision", std::string(dtype_name(c.precision))},
                        {"mode", c.low_precision_model ? "low-precision-model" : "autocast"},
                        {"loss_scale", c.loss_scale}, {"init_scale", c.init_scale}, {"growth_factor", c.growth_factor},
                        {"backoff_factor", c.backoff_factor}, {"growth_interval", c.growth_interval},
                        {"hysteresis", c.hysteresis}, {"min_scale", c.min_scale}, {"optimizer", c.optimizer},
                        {"lr", c.lr}, {"weight_decay", c.weight_decay}, {"momentum", c.momentum}, {"clip", c.clip},
                        {"schedule", c.schedule}, {"warmup", c.warmup}, {"stochastic_rounding", c.stochastic_rounding},
                        {"steps", c.steps}, {"batch_size", c.batch_size}, {"grad_accum", c.grad_accum},
                        {"seed", c.seed}, {"hidden", c.hidden}, {"layers", c.layers}, {"cnn_width", c.width},
                        {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}, {"block_size", c.block_size}}
      .dump();
}

std::map<std::string, std::int64_t> peaks() {
  const MemoryStats m = memory_stats();
  std::map<std::string, std::int64_t> out;
  for (std::size_t i = 0; i < kMemoryCategories; ++i) out[std::string(category_name(static_cast<MemoryCategory>(i)))] = m.peak[i];
  out["total"] = m.peak_total;
  return out;
}

}  // namespace

TrainResult train(const TrainConfig& config, const TrainCallbacks& cb) {
  TrainConfig c = config;
  check(c);
  for (const std::string& name : c.resume_allow) {
    if (!changeable_on_resume("--" + name)) {
      throw std::invalid_argument("--resume-allow: '" + name + "' is not one of lr, schedule, warmup, weight-decay, "
                                  "momentum, clip, grad-accum, stochastic-rounding, loss-scale");
    }
  }
  if (c.threads > 0) omp_set_num_threads(c.threads);
  const bool text = c.model == "gpt";
  const std::string data_path = !c.data.empty() ? c.data : text ? kFortunesDir.string() : kFashionMnistDir.string();
  const DType low = c.precision;

  // Data.
  std::optional<ImageDataset> train_set, test_set;
  std::optional<TextCorpus> corpus;
  if (text) {
    corpus = TextCorpus::load(data_path);
    // Checked now, not at the first evaluation: each split must hold one window of block + 1 bytes.
    for (const auto& [split, bytes] : {std::pair<const char*, std::size_t>{"training", corpus->train.size()},
                                       {"validation", corpus->validation.size()}}) {
      if (static_cast<std::int64_t>(bytes) <= c.block_size) {
        throw DataError(data_path + ": the " + split + " text (" + std::to_string(bytes) + " bytes) is shorter than one window of " +
                        std::to_string(c.block_size + 1) + " bytes (--block-size + 1); use more text or a smaller --block-size");
      }
    }
  } else {
    train_set = load_mnist_format(data_path, true);
    test_set = load_mnist_format(data_path, false);
  }
  DataShape shape;
  if (!text) {
    shape = image_shape(*train_set, *test_set, data_path);
    // The CNN pools twice by 2: a side under 4 pixels would leave nothing to pool.
    if (c.model == "cnn" && (shape.height < 4 || shape.width < 4)) {
      throw DataError(data_path + ": the CNN needs images of at least 4x4 pixels (it pools twice by 2); these are " +
                      std::to_string(shape.height) + "x" + std::to_string(shape.width));
    }
  }
  if (c.epochs > 0) {
    if (text) throw std::invalid_argument("--epochs applies to image data; give a text model --steps");
    const std::int64_t per_step = c.batch_size * c.grad_accum;
    c.steps = c.epochs * ((train_set->size() + per_step - 1) / per_step);  // at most 10^6 * 2^31: no overflow
    if (c.steps > 1'000'000'000'000) throw std::invalid_argument("--epochs: " + std::to_string(c.steps) + " steps is too many");
  }

  // Model.
  std::unique_ptr<nn::Module> model;
  std::function<Tensor(const Tensor&)> classify;
  nn::Gpt* gpt = nullptr;
  {
    MemoryCategoryScope params(MemoryCategory::parameters);
    if (c.model == "mlp") {
      auto m = std::make_unique<nn::Mlp>(nn::MlpConfig{.in = shape.channels * shape.height * shape.width, .hidden = c.hidden,
                                                           .layers = c.layers, .classes = shape.classes, .seed = c.seed});
      classify = [p = m.get()](const Tensor& x) { return p->forward(x); };
      model = std::move(m);
    } else if (c.model == "cnn") {
      auto m = std::make_unique<nn::Cnn>(nn::CnnConfig{.in_channels = shape.channels, .width = c.width,
                                                           .classes = shape.classes, .seed = c.seed});
      classify = [p = m.get()](const Tensor& x) { return p->forward(x); };
      model = std::move(m);
    } else {
      auto m = std::make_unique<nn::Gpt>(nn::GptConfig{c.n_layer, c.n_head, c.n_embd, c.block_size, 256, c.seed});
      gpt = m.get();
      model = std::move(m);
    }
  }
  if (c.low_precision_model) model->to_dtype(low);
  std::unique_ptr<Optimizer> opt = make_optimizer(c, model->parameters());
  LossScaler scaler(scaler_options(c));
  // constant: the warm-up, then the learning rate (a cosine from lr to lr).
  const LrSchedule schedule = LrSchedule::warmup_cosine(c.lr, c.warmup, c.steps, c.schedule == "cosine" ? 0.1 * c.lr : c.lr);
  const DType input_dtype = c.low_precision_model ? low : DType::f32;
  const auto region = [&]() -> std::unique_ptr<Autocast> {
    return low == DType::f32 ? nullptr : std::make_unique<Autocast>(low);
  };

  // The data order, the text sampler, and one training batch's loss.
  std::optional<BatchOrder> order;
  if (!text) order.emplace(train_set->size(), c.batch_size, c.seed);
  std::mt19937_64 text_rng(c.seed);
  std::vector<std::int64_t> ids, targets;
  const auto batch_loss = [&]() -> Tensor {
    const auto scope = region();
    if (text) {
      TextCorpus::sample(corpus->train, c.batch_size, c.block_size, text_rng, ids, targets);
      return cross_entropy(gpt->forward(ids, c.batch_size, c.block_size), targets);
    }
    const std::vector<std::int64_t> idx = order->next();
    std::vector<std::int64_t> y;
    for (std::int64_t i : idx) y.push_back(train_set->labels[static_cast<std::size_t>(i)]);
    return cross_entropy(classify(cast(gather_rows(train_set->images, idx), input_dtype)), y);
  };
  const auto evaluate = [&](std::int64_t step, bool full) {
    NoGradGuard no_grad;
    model->eval();
    EvalRecord r{step, 0, std::nullopt};
    if (text) {
      std::mt19937_64 rng(c.seed + 1000);  // the same validation windows every time
      for (std::int64_t b = 0; b < c.eval_batches; ++b) {
        TextCorpus::sample(corpus->validation, c.batch_size, c.block_size, rng, ids, targets);
        const auto scope = region();
        r.val_loss += cross_entropy(gpt->forward(ids, c.batch_size, c.block_size), targets).item() / static_cast<double>(c.eval_batches);
      }
    } else {
      const std::int64_t n = full ? test_set->size() : std::min<std::int64_t>(test_set->size(), 2000);
      std::int64_t right = 0;
      for (std::int64_t at = 0; at < n; at += 500) {
        std::vector<std::int64_t> idx, y;
        for (std::int64_t i = at; i < std::min(n, at + 500); ++i) {
          idx.push_back(i);
          y.push_back(test_set->labels[static_cast<std::size_t>(i)]);
        }
        const auto scope = region();
        const Tensor logits = cast(classify(cast(gather_rows(test_set->images, idx), input_dtype)), DType::f32);
        r.val_loss += cross_entropy(logits, y, Reduction::sum).item();
        const std::vector<double> l = logits.to_doubles();
        for (std::size_t i = 0; i < y.size(); ++i) {
          const auto row = l.begin() + static_cast<std::ptrdiff_t>(i) * shape.classes;
          right += (std::max_element(row, row + shape.classes) - row) == y[i] ? 1 : 0;
        }
      }
      r.val_loss /= static_cast<double>(n);
      r.val_accuracy = static_cast<double>(right) / static_cast<double>(n);
    }
    model->train();
    return r;
  };

  TrainResult result;
  result.total_steps = c.steps;
  if (c.resume) {
    if (c.checkpoint_dir.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
    const std::vector<std::filesystem::path> all = list_checkpoints(c.checkpoint_dir);
    if (all.empty()) throw CheckpointError(c.checkpoint_dir + ": no checkpoint to resume from");
    const CheckpointState st = load_checkpoint(all.back(), *model, *opt, [&](const auto& meta) {
      const auto it = meta.find("config");
      if (it == meta.end()) throw CheckpointError(all.back().string() + ": has no 'config' in its metadata");
      check_signature(all.back(), it->second, signature(c, shape), c.resume_allow);
    });
    const auto get = [&](const std::string& k) -> const std::string& {
      const auto it = st.extra.find(k);
      if (it == st.extra.end()) throw CheckpointError(all.back().string() + ": has no '" + k + "' in its metadata");
      return it->second;
    };
    try {
      scaler.load_state(st.scaler);
      if (text) {
        std::istringstream in(get("text_rng"));
        in >> text_rng;
        if (!in) throw std::invalid_argument("metadata 'text_rng' is not a generator state");
      } else {
        order->seek(metadata_integer(all.back(), st.extra, "data_epoch"), metadata_integer(all.back(), st.extra, "data_position"));
      }
    } catch (const std::invalid_argument& e) {  // bad data in the file, not a bad flag: exit 1, naming it
      throw CheckpointError(all.back().string() + ": " + e.what());
    }
    result.first_step = st.step + 1;
  }
  const auto save = [&](std::int64_t step) {
    CheckpointState st{step, scaler.state(), {{"config", signature_json(signature(c, shape))}, {"run", config_json(c, shape)}}};
    if (text) {
      std::ostringstream out;
      out << text_rng;
      st.extra["text_rng"] = out.str();
    } else {
      st.extra["data_epoch"] = std::to_string(order->epoch());
      st.extra["data_position"] = std::to_string(order->position());
    }
    std::filesystem::create_directories(c.checkpoint_dir);
    save_checkpoint(checkpoint_path(c.checkpoint_dir, step), *model, *opt, st);
    prune_checkpoints(c.checkpoint_dir, c.keep);
  };
  result.throughput_unit = text ? "tokens/s" : "images/s";
  const double items_per_step = static_cast<double>(c.batch_size * c.grad_accum * (text ? c.block_size : 1));
  reset_peak_memory();
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t step = result.first_step; step <= c.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    opt->set_lr(schedule.at(step - 1));
    double loss = 0;
    for (std::int64_t micro = 0; micro < c.grad_accum; ++micro) {
      const Tensor l = batch_loss();
      loss += l.item() / static_cast<double>(c.grad_accum);
      scaler.scale_loss(mul(l, 1.0 / static_cast<double>(c.grad_accum))).backward();
    }
    if (std::find(c.inject_nonfinite.begin(), c.inject_nonfinite.end(), step) != c.inject_nonfinite.end()) {
      inject_inf(model->parameters().front().grad());
    }
    const StepReport rep = scaled_step(scaler, *opt, c.clip);
    opt->zero_grad();
    if (!rep.warning.empty()) result.warnings.push_back(rep.warning);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StepRecord rec{step, loss, opt->lr(), rep.scale, rep.grad_norm, rep.underflow_fraction,
                         items_per_step / seconds, rep.skipped, rep.nonfinite, peaks(),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
    result.skipped_steps += rep.skipped ? 1 : 0;
    result.steps.push_back(rec);
    if (cb.on_step) cb.on_step(rec, c.steps);
    if (!c.checkpoint_dir.empty() && ((c.checkpoint_every > 0 && step % c.checkpoint_every == 0) || step == c.steps)) {
      save(step);
    }
    // The run's peak is the training steps' (evaluation batches have their own, not reported).
    for (const auto& [category, bytes] : rec.peak_bytes) {
      result.peak_bytes[category] = std::max(result.peak_bytes[category], bytes);
    }
    if (step % c.eval_every == 0 || step == c.steps) {
      result.evals.push_back(evaluate(step, step == c.steps));
      if (cb.on_eval) cb.on_eval(result.evals.back());
      reset_peak_memory();
    }
  }
  if (result.evals.empty()) {  // resumed at or past the last step: evaluate what was loaded
    result.evals.push_back(evaluate(c.steps, true));
  }
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.peak_bytes.empty()) result.peak_bytes = peaks();  // resumed past the last step
  return result;
}

}  // namespace mantissa::cli
