// `mantissa export CHECKPOINT --to pytorch OUT.safetensors`: a checkpoint's weights as a PyTorch
// state_dict (safetensors, PyTorch's names), for the PyTorch twins or a user's own model of the same
// shape; docs/interop.md. In fp32 or bf16; or quantized (--dtype mxfp8, nvfp4, ...: a microscaled recipe of
// mantissa/numeric/recipes.h whose elements safetensors has a dtype for): the weights of the
// layers the run trained in fp8 or a microscaled recipe written as the recipe stores them (FP4 packed two a
// byte, FP8 elements, E8M0 or E4M3 block scales, NVFP4's f32 scale per tensor), under the names NVIDIA's
// ModelOpt checkpoints use (weight, weight_scale, weight_scale_2), the rest in bf16.
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <set>

#include "commands.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/io/weights.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/numeric/recipes.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/precision_plan.h"
#include "output_flags.h"

namespace mantissa::cli {
namespace {

struct ExportArgs {
  std::string checkpoint, to = "pytorch", out, dtype = "fp32";
};

// The layers the checkpoint's run trained in fp8 (its precision plan's fp8 level, or any microscaled recipe).
std::set<std::string> fp8_layers(const Safetensors& f, const std::string& checkpoint) {
  const auto it = f.metadata.find("precision_plan");
  std::set<std::string> out;
  if (it == f.metadata.end()) return out;
  train::PrecisionPlan plan;
  try {
    plan = train::PrecisionPlan::parse(it->second);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(checkpoint + ": metadata 'precision_plan': " + e.what());
  }
  for (const auto& [layer, level] : plan.layers) {
    if (level == train::LayerPrecision::quantized) out.insert(layer);
  }
  return out;
}

// A microscaled recipe whose elements PyTorch has a dtype for.
bool exportable(const RecipeInfo& r) { return r.microscaled() && !r.export_dtype.empty(); }

int export_quantized(const ExportArgs& a, const RecipeInfo& recipe) {
  if (recipe.export_dtype.empty()) {
    throw std::invalid_argument("--dtype " + a.dtype + ": PyTorch has no dtype for its " + recipe.forward.name() +
                                " elements, so no state_dict holds them (export bf16, or a recipe with fp8 or fp4 elements)");
  }
  const QuantSpec spec = quant_spec(a.dtype);  // the recipe's 1-D blocks along a row: what inference kernels take
  const bool fp4 = recipe.export_dtype == "F4";  // stored two a byte
  const Safetensors checkpoint = read_safetensors(a.checkpoint);  // read once: its plan, then its weights
  const std::set<std::string> layers = fp8_layers(checkpoint, a.checkpoint);
  if (layers.empty()) {
    throw std::invalid_argument(a.checkpoint + ": its run trained no layer in fp8 or a microscaled recipe, so no weights were "
                                "trained through a quantizer: export fp32 or bf16, or train with --precision " + a.dtype);
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::pair<std::string, RawTensor>> raw;
  std::vector<std::string> quantized, kept;
  for (const auto& [name, t] : checkpoint_weights(checkpoint, a.checkpoint, DType::f32)) {
    const std::string layer = name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
    const bool packs = t.dim() == 2 && (!fp4 || t.size(1) % 2 == 0);
    if (layers.count(layer) == 0 || !packs) {
      if (layers.count(layer) != 0) kept.push_back(layer);
      tensors.emplace_back(name, cast(t, DType::bf16));
      continue;
    }
    const std::int64_t rows = t.size(0), cols = t.size(1);
    const QuantizedBlocks q = quantize_blocks({t.data_as<float>(), static_cast<std::size_t>(t.numel())}, rows, cols, spec);
    raw.emplace_back(name, RawTensor{std::string(recipe.export_dtype), {rows, cols}, fp4 ? pack_fp4(q.codes) : q.codes});
    const std::int64_t blocks = (cols + spec.block_cols - 1) / spec.block_cols;
    raw.emplace_back(layer + ".weight_scale", RawTensor{spec.scale == ScaleFormat::e8m0 ? "F8_E8M0" : "F8_E4M3", {rows, blocks}, q.scale_codes});
    if (spec.scale == ScaleFormat::e4m3) {  // NVFP4's second level: one f32 per tensor
      RawTensor s{"F32", {}, std::vector<std::uint8_t>(4)};
      std::memcpy(s.bytes.data(), &q.tensor_scale, 4);  // little-endian, as the format is
      raw.emplace_back(layer + ".weight_scale_2", std::move(s));
    }
    quantized.push_back(layer);
  }
  write_safetensors(a.out, tensors, raw, {{"format", "pt"}, {"source", a.checkpoint}, {"quantization", a.dtype + " (" + spec.str() + ")"}});
  fmt::print("{}: {} layers' weights in {} ({}; value = element x weight_scale{}), {} tensors in bf16; PyTorch's names\n", a.out,
             quantized.size(), a.dtype, spec.str(), spec.scale == ScaleFormat::e4m3 ? " x weight_scale_2" : "", tensors.size());
  if (!kept.empty()) fmt::print("kept in bf16 (not a 2-D weight of an even width): {}\n", fmt::join(kept, ", "));
  return 0;
}

int run_export(const ExportArgs& a) {
  if (a.to != "pytorch") throw std::invalid_argument("--to: '" + a.to + "' is not a format mantissa exports to (pytorch)");
  if (const QuantRecipe* recipe = QuantRecipe::find(a.dtype); recipe != nullptr && recipe->info().microscaled()) {
    return export_quantized(a, recipe->info());
  }
  if (a.dtype != "fp32" && a.dtype != "bf16") {
    throw std::invalid_argument("--dtype: '" + a.dtype + "' is not fp32, bf16, " + recipe_names(exportable));
  }
  const auto weights = checkpoint_weights(a.checkpoint, a.dtype == "bf16" ? DType::bf16 : DType::f32);
  // {"format": "pt"}: what safetensors.torch.save_file writes, so its load_file takes it as PyTorch's.
  write_safetensors(a.out, weights, {{"format", "pt"}, {"source", a.checkpoint}});
  fmt::print("{}: {} tensors of {} in {}, PyTorch's names\n", a.out, weights.size(), a.checkpoint, a.dtype);
  return 0;
}

}  // namespace

Run add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  app.add_option("checkpoint", a->checkpoint, "A checkpoint (ckpt-N.safetensors) of mantissa train")->required();
  app.add_option("--to", a->to, "The format: pytorch (a state_dict in safetensors)")->capture_default_str();
  add_output_file(app, "out,--out", a->out, "Where to write it (OUT.safetensors)")->required();
  app.add_option("--dtype", a->dtype, "fp32 or bf16; or " + recipe_names(exportable) + ": the weights of the layers the run trained in fp8 "
                                      "or a microscaled recipe quantized by it (the rest bf16)")
      ->capture_default_str();
  return [a] { return run_export(*a); };
}

}  // namespace mantissa::cli
