// `mantissa train`'s flags made into a run: checked, turned into the library's typed options, a data
// source and a model, and trained by train::Trainer; plus what only the command knows: which settings a
// checkpoint must share with the run resuming from it.
#include "training.h"

#include <omp.h>
#include <unistd.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <tuple>

#include "interrupt.h"
#include "machine.h"
#include "number_flags.h"
#include "output_file.h"
#include "settings_agreement.h"
#include "mantissa/core/input_file.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/core/memory.h"
#include "mantissa/dist/device_reducer.h"
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/json_number.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/io/weights.h"
#include "mantissa/numeric/parse_number.h"
#include "mantissa/train/builders.h"
#include "mantissa/train/setting_ranges.h"

namespace mantissa::cli {

namespace {

// --precision-plan FILE: the plan, which must be in the run's 16-bit format (which it sets when
// --precision was left at fp32).
train::PrecisionPlan read_plan(const RunOptions& c, const std::string& path, DType& precision) {
  const std::string flag = c.name("precision_plan");
  std::string text;
  try {
    text = InputFile(path, "a precision plan", kMaxPlanBytes).read_text();
  } catch (const InputFileError& e) {
    throw UsageError(flag + ": " + e.what());
  }
  train::PrecisionPlan plan;
  try {
    plan = train::PrecisionPlan::parse(text);
  } catch (const std::invalid_argument& e) {
    throw UsageError(flag + " " + path + ": " + e.what());
  }
  if (precision == DType::f32) precision = plan.low;
  if (plan.low != precision) {
    throw UsageError(flag + " " + path + ": the plan is for " + train::layer_precision_name(train::LayerPrecision::low, plan.low) +
                     "; give " + c.name("precision") + " " + train::layer_precision_name(train::LayerPrecision::low, plan.low));
  }
  return plan;
}

// Each path names a module of the model or a prefix of some (a typo would otherwise select nothing).
void check_layer_paths(nn::Module& model, const std::vector<std::string>& paths, const std::string& flag) {
  const auto modules = model.named_modules();
  for (const std::string& p : paths) {
    const bool found = std::any_of(modules.begin(), modules.end(), [&](const auto& m) {
      return !m.first.empty() && nn::path_within(m.first, p);
    });
    if (!found) {
      std::string some;
      for (std::size_t i = 1; i < modules.size() && i < 6; ++i) some += (i > 1 ? ", " : "") + modules[i].first;
      throw UsageError(flag + ": '" + p + "' is no layer of this model (its layers: " + some + ", ...)");
    }
  }
}

using train::DataShape;

// What a checkpoint must agree on with the run resuming from it, as (name, value): the flags that shape
// the model, its precision and its data order, and the sizes taken from the data.
using Signature = std::vector<std::pair<std::string, std::string>>;

Signature signature(const RunOptions& c, const DataShape& d) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  // (The FP8 recipe is checked by the trainer itself, from the checkpoint's "fp8" metadata.)
  Signature s{{"--model", c.model}, {"--precision", std::string(train::precision_name(c.precision.compute))},
              {"--mode", std::string(train::precision_mode_name(c.precision.mode))}, {"--optimizer", c.optimizer}};
  if (c.model == "gpt") {
    s.insert(s.end(), {{"--n-layer", n(c.n_layer)}, {"--n-head", n(c.n_head)}, {"--n-embd", n(c.n_embd)},
                       {"--block-size", n(c.block_size)}, {"--gelu", c.gelu}, {"vocabulary", "256"}});
  } else if (c.model == "lstm") {
    s.insert(s.end(), {{"--hidden", n(c.hidden)}, {"--layers", n(c.layers)}, {"--embd", n(c.embd)},
                       {"--bptt", n(c.bptt)}, {"vocabulary", "256"}});
  } else {
    if (c.model == "mlp") s.insert(s.end(), {{"--hidden", n(c.hidden)}, {"--layers", n(c.layers)}});
    if (c.model == "cnn" || c.model == "segment") s.emplace_back("--width", n(c.width));
    s.insert(s.end(), {{"image size (CxHxW)", d.input()}, {"classes", n(d.classes)}, {"--normalize", c.normalize}});
  }
  s.insert(s.end(), {{"--batch-size", n(c.batch_size)}, {"--seed", std::to_string(c.seed)},
                     {"--master-weights", c.master_weights ? "on" : "off"}, {"--fp32-ops", train::fp32_ops_setting(c.precision)}});
  // Settings a run may change on resume on purpose (--resume-allow): what the optimizer, the schedule
  // and the loss scaler do from here on.
  const auto x = [](double v) { return exact_number(v); };
  const LossScalerOptions o = train::loss_scaler_options(c);
  s.insert(s.end(), {{"--lr", x(c.lr)}, {"--schedule", c.schedule}, {"--warmup", n(c.warmup)},
                     {"--weight-decay", x(c.weight_decay)}, {"--momentum", x(c.momentum)}, {"--clip", x(c.clip)},
                     {"--grad-accum", n(c.grad_accum)}, {"--stochastic-rounding", c.stochastic_rounding ? "on" : "off"},
                     {"--loss-scale", train::loss_scaling_name(o)}});
  return s;
}

// The settings a resume may find changed (resume_allow), by key.
constexpr const char* kChangeableOnResume[] = {"lr", "schedule", "warmup", "weight_decay", "momentum", "clip", "grad_accum",
                                               "stochastic_rounding", "loss_scale"};

// A name given to resume_allow ("weight-decay" from the command, "weight_decay" from Python) as its key.
std::string resume_key(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

bool changeable_on_resume(const std::string& name) {
  const std::string key = resume_key(name);
  return std::any_of(std::begin(kChangeableOnResume), std::end(kChangeableOnResume), [&](const char* k) { return key == k; });
}

// A setting as resume_allow takes it from this door: "weight-decay" or "weight_decay".
std::string bare_name(const RunOptions& c, std::string_view key) {
  const std::string name = c.name(key);
  return name.rfind("--", 0) == 0 ? name.substr(2) : name;
}

// A signature's name (a flag, as checkpoints store them, or a fact as "classes") as this door says it.
std::string said(const RunOptions& c, const std::string& name) {
  return name.rfind("--", 0) == 0 ? c.name(resume_key(name.substr(2))) : name;
}

std::string signature_json(const Signature& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : s) j[k] = v;
  return j.dump();
}

// Throws naming every setting where the checkpoint's run and this one differ, except those allowed.
void check_signature(const RunOptions& c, const std::filesystem::path& path, const std::string& stored, const Signature& ours) {
  nlohmann::json theirs;
  try {
    theirs = nlohmann::json::parse(stored);
  } catch (const nlohmann::json::exception&) {
  }
  if (!theirs.is_object()) {
    throw CheckpointError(path.string() + ": written by another version of mantissa (its settings: " + stored + ")");
  }
  // Settings added after a checkpoint was written: it was written with what they mean when absent.
  const std::map<std::string, std::string> absent_means = {
      {"--master-weights", "on"}, {"--fp32-ops", "default"}, {"--gelu", "erf"}, {"--normalize", "auto"}};
  std::string diff;
  for (const auto& [k, v] : ours) {
    const auto it = theirs.find(k);
    const auto implied = absent_means.find(k);
    std::string was = it != theirs.end() && it->is_string() ? it->get<std::string>()
                      : it == theirs.end() && implied != absent_means.end() ? implied->second : "(none)";
    // Older checkpoints' spelling of a dtype (f32, f16), said as today's by the names' one home.
    if (k == "--precision" && (was == "f32" || was == "f16")) was = train::precision_name(train::parse_precision(was));
    const bool allow = std::any_of(c.resume_allow.begin(), c.resume_allow.end(),
                                   [&](const std::string& a) { return k.rfind("--", 0) == 0 && resume_key(a) == resume_key(k.substr(2)); });
    if (was != v && !allow) diff += (diff.empty() ? "" : ", ") + said(c, k) + " " + was + " (this run: " + v + ")";
  }
  if (!diff.empty()) {
    std::string changeable;
    constexpr std::size_t kLast = std::size(kChangeableOnResume) - 1;
    for (std::size_t i = 0; i <= kLast; ++i) {
      changeable += (i == 0 ? "" : i == kLast ? " or " : ", ") + c.name(kChangeableOnResume[i]);
    }
    throw CheckpointError(path.string() + ": written by a run with " + diff + " (" + c.name("resume_allow") +
                          " NAME,... accepts a changed " + changeable + ")");
  }
}

// Every setting of the run, for the checkpoint's metadata (people and tools read it; resume checks the
// signature above).
std::string config_json(const RunOptions& c, const DataShape& d) {
  return nlohmann::json{{"model", c.model}, {"channels", d.channels}, {"height", d.height}, {"width", d.width},
                        {"classes", d.classes}, {"data", c.data}, {"train_images", c.train_images}, {"train_labels", c.train_labels},
                        {"test_images", c.test_images}, {"test_labels", c.test_labels}, {"normalize", c.normalize}, {"precision", std::string(dtype_name(c.precision.compute))},
                        {"fp8", c.precision.fp8 ? c.precision.fp8->str() : "off"}, {"adaptive", c.adaptive},
                        {"precision_plan", c.precision_plan}, {"init_from", c.init_from},
                        {"mode", std::string(train::precision_mode_name(c.precision.mode))},
                        {"loss_scale", c.loss_scale}, {"init_scale", c.init_scale}, {"growth_factor", c.growth_factor},
                        {"backoff_factor", c.backoff_factor}, {"growth_interval", c.growth_interval},
                        {"hysteresis", c.hysteresis}, {"min_scale", c.min_scale}, {"optimizer", c.optimizer},
                        {"lr", c.lr}, {"weight_decay", c.weight_decay}, {"momentum", c.momentum}, {"clip", c.clip}, {"loss_weight", c.loss_weight},
                        {"schedule", c.schedule}, {"warmup", c.warmup}, {"stochastic_rounding", c.stochastic_rounding},
                        {"steps", c.steps}, {"batch_size", c.batch_size}, {"grad_accum", c.grad_accum},
                        {"seed", c.seed}, {"hidden", c.hidden}, {"layers", c.layers}, {"cnn_width", c.width},
                        {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}, {"block_size", c.block_size},
                        {"gelu", c.gelu}, {"embd", c.embd}, {"bptt", c.bptt}, {"master_weights", c.master_weights}, {"fp32_ops", train::fp32_ops_setting(c.precision)}}
      .dump();
}

// What the ranks of a data-parallel run must agree on, by flag: what a checkpoint must agree on, and
// what the ranks do together (evaluation, checks, the wire). The trainer adds its own (parameter shapes,
// the data's contents).
train::RunSettings rank_settings(const RunOptions& c, const DataShape& shape) {
  train::RunSettings s = signature(c, shape);
  const auto comma_list = [](const auto& items, const auto& text) {
    std::string out;
    for (const auto& item : items) {
      if (!out.empty()) out += ',';
      out += text(item);
    }
    return out;
  };
  const std::string inject = comma_list(c.inject_nonfinite, [](std::int64_t step) { return std::to_string(step); });
  const std::string fp32_layers = comma_list(c.precision.f32_layers, [](const std::string& layer) { return layer; });
  s.insert(s.end(), {{"--steps", std::to_string(c.steps)}, {"--eval-every", std::to_string(c.eval_every)},
                     {"--eval-batches", std::to_string(c.eval_batches)}, {"--checksum-every", std::to_string(c.checksum_every)},
                     {"--grad-reduce", std::string(dtype_name(c.grad_reduce))}, {"--bucket-mb", exact_number(c.bucket_mb)},
                     {"--overlap", c.overlap ? "on" : "off"}, {"--inject-nonfinite", inject}, {"--inject-rank", std::to_string(c.inject_rank)},
                     {"--update-stats-every", std::to_string(c.update_stats_every)},
                     {"--trace-nonfinite", c.trace_nonfinite ? "on" : "off"}, {"--fp32-layers", fp32_layers}});
  return s;
}

}  // namespace

namespace {

// Under mpirun with several ranks on this machine, the machine's rank i takes GPU i (one GPU a process),
// unless CUDA_VISIBLE_DEVICES already says which. Before the first CUDA call, or it has no effect. Returns
// what it chose ("" when it chose nothing).
std::string pick_gpu_of_local_rank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local == nullptr || local_size == nullptr || std::getenv("CUDA_VISIBLE_DEVICES") != nullptr) return "";
  if (!is_number<int>(local_size) || parse_number<int>(local_size, "OMPI_COMM_WORLD_LOCAL_SIZE") < 2) return "";
  setenv("CUDA_VISIBLE_DEVICES", local, 1);
  return local;
}

}  // namespace

// --device: cpu, or cuda (cuda:0, the one GPU a process uses), refused with the reason where no GPU is usable.
Device device_option(const std::string& name, const std::string& flag) {
  if (name == "cpu") return Device::cpu();
  if (name != "cuda" && name != "cuda:0") throw UsageError(flag + ": '" + name + "' is not cpu or cuda");
  static const std::string picked = pick_gpu_of_local_rank();
  if (!cuda_available()) {
    const std::string which = picked.empty() ? "" : " (GPU " + picked + ", this machine's rank " + picked + ")";
    throw std::runtime_error(flag + " cuda" + which + ": " + cuda_info().unavailable);
  }
  return Device{DeviceType::cuda, 0};
}

// The checkpoint a resume starts from: --resume-from's file, or the newest in --checkpoint-dir that reads
// whole (a newer one that does not is named and passed over).
std::filesystem::path resume_point(const RunOptions& c) {
  if (!c.resume_from.empty()) return c.resume_from;
  std::vector<std::pair<std::filesystem::path, std::string>> skipped;  // said once an older one is found, else the error says it
  const auto found = newest_readable_checkpoint(c.checkpoint_dir, [&](const std::filesystem::path& path, const std::string& why) {
    skipped.emplace_back(path, why);
  });
  if (!found) {
    if (skipped.empty()) throw CheckpointError(c.checkpoint_dir + ": no checkpoint to resume from");
    throw CheckpointError(skipped.front().second + (skipped.size() > 1 ? " (and no older checkpoint there reads whole either)" : ""));
  }
  for (const auto& [path, why] : skipped) {
    progress("skipping %s, which does not read whole (%s); resuming from an older one\n", path.filename().string().c_str(), why.c_str());
  }
  return *found;
}

std::shared_ptr<dist::ProcessGroup> process_group() {
  static const std::shared_ptr<dist::ProcessGroup> group = dist::ProcessGroup::from_environment();
  return group;
}

namespace {

// The data c names, read and normalized.
train::Dataset read_run_data(const RunOptions& c) {
  const auto [mean, stddev] = normalization(c);
  if (!c.train_images.empty()) return train::load_image_files({c.train_images, c.train_labels, c.test_images, c.test_labels}, mean, stddev);
  return train::load_dataset(c.model, c.data, mean, stddev);
}

}  // namespace

train::Dataset RunDataCache::data(const RunOptions& c) {
  // What read_run_data reads depends on these alone (the model only by whether it trains on text).
  const std::string key = fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", train::is_text_model(c.model) ? "text" : "images", c.data, c.train_images,
                                      c.train_labels, c.test_images, c.test_labels, c.normalize);
  auto it = read_.find(key);
  if (it == read_.end()) it = read_.emplace(key, read_run_data(c)).first;
  return it->second;
}

PreparedRun prepare_run(const RunOptions& config, std::optional<train::Dataset> in_memory, RunDataCache* cache) {
  set_quiet(config.quiet);
  PreparedRun r;
  r.config = config;
  RunOptions& c = r.config;
  std::optional<train::PrecisionPlan> plan;
  if (!c.precision_plan.empty() && !c.adaptive) plan = read_plan(c, c.precision_plan, c.precision.compute);
  check_run_options(c);
  const std::shared_ptr<dist::ProcessGroup> group = process_group();
  if (group->size() > 1) {
    if (c.batch_size % group->size() != 0) {
      throw UsageError(c.name("batch_size") + " " + std::to_string(c.batch_size) + " does not split over " +
                                  std::to_string(group->size()) + " ranks: give a multiple of the number of ranks (each "
                                  "rank trains on batch-size / ranks rows of every batch)");
    }
    if (c.inject_rank >= group->size()) {
      throw UsageError(c.name("inject_rank") + " " + std::to_string(c.inject_rank) + ": there are " +
                                  std::to_string(group->size()) + " ranks");
    }
    group->set_timeout(c.dist_timeout);
  }
  for (const std::string& name : c.resume_allow) {
    if (!changeable_on_resume(name)) {
      std::string keys;
      for (const char* key : kChangeableOnResume) keys += (keys.empty() ? "" : ", ") + bare_name(c, key);
      throw UsageError(c.name("resume_allow") + ": '" + name + "' is not one of " + keys);
    }
  }
  if (c.resume && c.checkpoint_dir.empty()) {
    throw UsageError(c.name("resume") + " needs " + c.name("checkpoint_dir") + " (or " + c.name("resume_from") + " FILE)");
  }
  if (!c.init_from.empty() && (c.resume || !c.resume_from.empty())) {
    throw UsageError(c.name("init_from") + " starts a new run from weights; " + c.name("resume") + " continues one from its checkpoint: give one");
  }
  if (std::string problem = thread_count_problem(c.threads); !problem.empty()) throw UsageError(c.name("threads") + ": " + problem);
  use_threads(c.threads);
  const Device device = device_option(c.device, c.name("device"));
  if (device.type == DeviceType::cuda && group->size() > 1) {
    const dist::NcclInfo nccl = dist::nccl_info();
    if (!nccl.unavailable.empty()) throw std::runtime_error(c.name("device") + " cuda under mpirun: data parallel on GPUs needs NCCL: " + nccl.unavailable);
  }
  const bool text = train::is_text_model(c.model);

  // Data, and the sizes the model takes from it.
  train::Dataset dataset = in_memory ? std::move(*in_memory) : cache != nullptr ? cache->data(c) : read_run_data(c);
  if (in_memory && c.data.empty()) c.data = dataset.path;
  if (in_memory && text != dataset.text.has_value()) {
    throw UsageError(c.name("model") + " " + c.model + (text ? " trains on text, not images" : " trains on images, not text"));
  }
  const std::string data_path = dataset.path;
  const DataShape shape = r.shape = train::data_shape(c.model, dataset);
  const std::int64_t train_size = dataset.train ? dataset.train->size() : 0;
  // What the run trains on, said at its start; images with the normalization, which checkpoints record.
  std::string& data_summary = r.data_summary = data_path + ": ";
  nlohmann::json normalization;  // null for text
  if (dataset.train) {
    const ImageDataset &tr = *dataset.train, &te = *dataset.test;
    data_summary += fmt::format("{} training images of {}, {} test, {} classes; normalized by {} mean {:.4f} and std {:.4f}",
                             tr.size(), shape.input(), te.size(), shape.classes,
                             c.normalize == "auto" ? "the training set's" : "the given (--normalize)", tr.mean, tr.stddev);
    normalization = {{"mean", tr.mean}, {"std", tr.stddev}};
  } else {
    data_summary += fmt::format("{} bytes of training text, {} of validation", dataset.text->train.size(), dataset.text->validation.size());
  }
  // Every training label the same (the segmenter's labels are its masks' classes).
  const bool single_class = dataset.train && c.model != "segment" &&
                            std::adjacent_find(dataset.train->labels.begin(), dataset.train->labels.end(),
                                               std::not_equal_to<>()) == dataset.train->labels.end();
  if (!normalization.is_null()) r.normalization = normalization.dump();
  r.data = train::make_source(
      c.model, std::move(dataset),
      {.batch_size = c.batch_size, .window = c.model == "lstm" ? c.bptt : c.block_size, .eval_batches = c.eval_batches, .seed = c.seed});
  if (c.epochs > 0) {
    if (text) throw UsageError(c.name("epochs") + " applies to image data; give a text model " + c.name("steps"));
    const std::int64_t per_step = c.batch_size * c.grad_accum;
    c.steps = c.epochs * ((train_size + per_step - 1) / per_step);  // at most 10^6 * 2^31: no overflow
    if (c.steps > 1'000'000'000'000) throw UsageError(c.name("epochs") + ": " + std::to_string(c.steps) + " steps is too many");
  }
  const std::vector<std::string> notes = check_agreement(
      c, {.data = data_path,
          .train_images = train_size,
          .labels_single_class = single_class,
          .dynamic_scaling = train::loss_scaler_options(c).kind == LossScaling::dynamic && c.loss_scale != "deepspeed",
          .ranks = group->size()});
  for (const std::string& note : notes) progress("note: %s\n", note.c_str());

  // The model.
  r.model = train::make_model(
      c.model,
      {.hidden = c.hidden, .layers = c.layers, .width = c.width, .n_layer = c.n_layer, .n_head = c.n_head,
       .n_embd = c.n_embd, .block_size = c.block_size, .gelu_tanh = c.gelu == "tanh", .embd = c.embd},
      shape, c.seed);

  // The run's typed options. constant: the warm-up, then the learning rate (a cosine from lr to lr).
  train::TrainerOptions o;
  o.precision = c.precision;
  o.optimizer = train::optimizer_options(c);
  o.loss_scaling = train::loss_scaler_options(c);
  o.schedule = LrSchedule::warmup_cosine(c.lr, c.warmup, c.steps, c.schedule == "cosine" ? 0.1 * c.lr : c.lr);
  o.clip = c.clip;
  o.loss_weight = c.loss_weight;
  o.grad_accum = c.grad_accum;
  o.steps = c.steps;
  o.eval_every = c.eval_every;
  o.checkpoints = {c.checkpoint_dir, c.checkpoint_every, 60 * c.checkpoint_minutes, c.keep};
  o.checkpoint_metadata = {{"config", signature_json(signature(c, shape))}, {"run", config_json(c, shape)}};
  if (!normalization.is_null()) o.checkpoint_metadata["normalization"] = normalization.dump();
  o.inject_nonfinite = c.inject_nonfinite;
  o.update_stats_every = c.update_stats_every;
  o.trace_nonfinite = c.trace_nonfinite;
  o.hold_lr_on_skip = c.hold_lr_on_skip;
  o.skip_patience = c.skip_patience;
  o.plateau_patience = c.plateau_patience;
  o.stop_on_stall = c.stop_on_stall;
  o.telemetry = c.telemetry;
  if (c.adaptive) {
    o.adaptive = c.adaptive_options;
    o.adaptive->low = c.precision.compute;
  }
  o.plan = plan;
  o.device = device;
  if (group->size() > 1) {
    o.data_parallel = train::DataParallelOptions{
        .group = group,
        .reducer = {.wire = c.grad_reduce, .bucket_bytes = static_cast<std::int64_t>(c.bucket_mb * (1 << 20)), .overlap = c.overlap},
        .checksum_every = c.checksum_every,
        .inject_rank = c.inject_rank,
        .settings = rank_settings(c, shape)};
  }
  // Weights from elsewhere before the trainer copies them into its f32 master weights.
  if (!c.init_from.empty()) load_weights(r.model->module(), c.init_from);
  r.trainer = std::make_unique<train::Trainer>(*r.model, *r.data, o);
  train::Trainer& trainer = *r.trainer;
  check_layer_paths(r.model->module(), c.precision.f32_layers, c.name("fp32_layers"));
  if (c.telemetry) check_layer_paths(r.model->module(), c.telemetry->layers, c.name("telemetry_layers"));

  if (c.resume || !c.resume_from.empty()) {
    const std::filesystem::path from = r.resumed_from = resume_point(c);
    std::int64_t their_steps = 0;  // the length of the run that wrote the checkpoint, where it says
    trainer.resume(from, [&](const auto& meta) {
      const auto it = meta.find("config");
      if (it == meta.end()) throw CheckpointError(from.string() + ": has no 'config' in its metadata");
      check_signature(c, from, it->second, signature(c, shape));
      const auto run = meta.find("run");
      const nlohmann::json j = run == meta.end() ? nlohmann::json() : nlohmann::json::parse(run->second, nullptr, false);
      try {
        if (j.is_object() && j.contains("steps")) their_steps = json_number<std::int64_t>(j, "steps");
      } catch (const std::invalid_argument& e) {
        throw CheckpointError(from.string() + ": metadata 'run': " + e.what());
      }
    });
    const std::int64_t done = trainer.next_step() - 1;
    if (done > c.steps) {
      throw std::invalid_argument(from.string() + " is at step " + std::to_string(done) + ", past --steps " +
                                  std::to_string(c.steps) + ": give --steps above " + std::to_string(done) + " to train on");
    }
    if (their_steps > 0 && their_steps != c.steps && c.schedule == "cosine") {
      progress("note: --steps %lld, where the checkpoint's run had %lld: the cosine learning-rate curve is stretched to the "
               "new length from step %lld on\n",
               static_cast<long long>(c.steps), static_cast<long long>(their_steps), static_cast<long long>(done + 1));
    }
  }
  return r;
}

TrainResult run(PreparedRun& r, const TrainCallbacks& cb, const std::function<void(const std::string&)>& on_run, bool catch_signals) {
  const RunOptions& c = r.config;
  train::Trainer& trainer = *r.trainer;
  const std::filesystem::path& resumed_from = r.resumed_from;
  const std::shared_ptr<dist::ProcessGroup> group = process_group();
  // The precision plan, once the run has nothing left to refuse (an error stays the only line).
  TrainCallbacks callbacks = cb;
  callbacks.on_start = [&] {
    if (!resumed_from.empty()) {
      progress("resumed from %s (step %lld)\n", resumed_from.string().c_str(), static_cast<long long>(trainer.next_step() - 1));
    }
    if (!c.init_from.empty()) progress("weights from %s\n", c.init_from.c_str());
    std::int64_t parameters = 0;
    for (const auto& [name, p] : r.model->module().named_parameters()) parameters += p.numel();
    progress("model: %s, %lld parameters; %d threads%s\n", c.model.c_str(), static_cast<long long>(parameters), omp_get_max_threads(),
             group->size() > 1 ? fmt::format(" on each of {} ranks", group->size()).c_str() : "");
    progress("data: %s\n", r.data_summary.c_str());
    progress("%s: %s\n", trainer.precision().label.c_str(), trainer.precision_plan().str().c_str());
    if (on_run) {
      nlohmann::ordered_json run = {{"record", "run"},
                            {"version", version()},
                            {"start_time", utc_now()},
                            {"wall_time", unix_time()},
                            {"machine", {{"cpu", cpu_name()}, {"threads", omp_get_max_threads()}, {"ranks", group->size()}}},
                            {"config", nlohmann::json::parse(config_json(c, r.shape))},
                            {"data", r.data_summary},
                            {"precision", trainer.precision().label},
                            {"precision_plan", nlohmann::json::parse(trainer.precision_plan().json())},
                            {"first_step", trainer.next_step()},
                            {"resumed_from", resumed_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(resumed_from.string())}};
      if (!r.normalization.empty()) run["normalization"] = nlohmann::json::parse(r.normalization);
      on_run(run.dump());
    }
    if (cb.on_start) cb.on_start();
  };
  // Ctrl-C or SIGTERM: stop at the next step boundary with a checkpoint, not lose the run.
  const bool tty = isatty(fileno(stderr)) != 0;
  std::filesystem::path last_saved;
  callbacks.on_save = [&](const std::filesystem::path& path, std::int64_t step) {
    last_saved = path;
    progress("%ssaved %s (step %lld)\n", tty ? "\n" : "", path.string().c_str(), static_cast<long long>(step));
    if (cb.on_save) cb.on_save(path, step);
  };
  callbacks.should_stop = [&] { return StopOnSignal::caught() != 0 || (cb.should_stop && cb.should_stop()); };
  TrainResult result;
  int signal = 0;
  {
    std::optional<StopOnSignal> catching;
    if (catch_signals) catching.emplace();
    result = trainer.run(callbacks);
    signal = StopOnSignal::caught();
  }
  if (result.stopped_at > 0 && signal != 0) {
    const std::string saved = last_saved.empty() ? "nothing saved (no --checkpoint-dir)"
                                                 : last_saved.string() + " saved; continue with --resume";
    throw Interrupted(signal, fmt::format("{} after step {} of {}: {}", signal == SIGINT ? "interrupted (SIGINT)" : "stopped (SIGTERM)",
                                          result.stopped_at, c.steps, saved));
  }
  return result;
}

train::PrecisionPlan check_run_starts(const RunOptions& config, const std::string& door, RunDataCache* cache) {
  struct RestoreQuiet {  // prepare_run sets it for the probe; put back however the probe ends
    bool was;
    ~RestoreQuiet() { set_quiet(was); }
  } restore{quiet()};
  RunOptions probe = config;
  probe.quiet = true;  // (its notes are said when it runs)
  try {
    return prepare_run(probe, std::nullopt, cache).trainer->precision_plan();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(door + ": " + e.what());
  }
}

TrainResult train(const RunOptions& config, const TrainCallbacks& callbacks, const std::function<void(const std::string&)>& on_run,
                  RunDataCache* cache) {
  PreparedRun r = prepare_run(config, std::nullopt, cache);
  return run(r, callbacks, on_run);
}

std::vector<std::pair<double, double>> loss_curve(const TrainResult& r) {
  std::vector<std::pair<double, double>> out;
  double ema = 0;
  for (const StepRecord& s : r.steps) {
    if (!std::isfinite(s.loss)) continue;
    ema = out.empty() ? s.loss : 0.95 * ema + 0.05 * s.loss;
    out.emplace_back(static_cast<double>(s.step), ema);
  }
  return out;
}

}  // namespace mantissa::cli
