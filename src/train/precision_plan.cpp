// Precision plans: resolved from a policy, applied to a model, printed; see mantissa/train/precision_plan.h.
#include "mantissa/train/precision_plan.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/io/json_number.h"
#include "mantissa/nn/layers.h"

namespace mantissa::train {

std::string layer_precision_name(LayerPrecision p, DType low) {
  switch (p) {
    case LayerPrecision::quantized: return "fp8";
    case LayerPrecision::low: return low == DType::f16 ? "fp16" : "bf16";
    case LayerPrecision::f32: return "fp32";
  }
  return "?";
}

LayerPrecision parse_layer_precision(std::string_view name, DType low) {
  for (const LayerPrecision p : {LayerPrecision::quantized, LayerPrecision::low, LayerPrecision::f32}) {
    if (name == layer_precision_name(p, low)) return p;
  }
  // (Appended piece by piece: GCC 12 warns of an overlapping copy in the chain of + here, wrongly.)
  std::string what = "'";
  what.append(name).append("' is not a layer precision of this run (fp32, ");
  what.append(layer_precision_name(LayerPrecision::low, low)).append(", fp8 or a microscaled recipe)");
  throw std::invalid_argument(what);
}

namespace {

// A recipe as a plan holds it: its name, the parameters that recipe reads, and the operands' own specs
// ("input", "weight", "grad_output": QuantSpec::str's words) where the plan gives them.
nlohmann::json recipe_json(const QuantOptions& o) {
  nlohmann::json j = {{"recipe", o.recipe.name()}};
  if (o.microscaled()) {
    if (o.recipe.info().nvfp4_parts) j.update({{"rht", o.nvfp4_rht}, {"sr", o.nvfp4_sr}, {"2d_weights", o.nvfp4_2d_weights}});
    if (o.recipe.info().scale_rule_choice()) j["mx_scale"] = scale_rule_name(o.mx_rule);
  } else {
    j.update({{"format", fp8_format_name(o.format)}, {"margin", o.margin}});
    if (o.recipe == QuantRecipe::delayed) j.update({{"history", o.amax_history}, {"reduction", amax_reduction_name(o.reduction)}});
    if (o.recipe == QuantRecipe::block) j["block"] = o.block;
  }
  if (o.keeps_rounding_count()) j["seed"] = o.seed;
  for (std::size_t i = 0; i < kFp8Operands; ++i) {
    if (o.specs[i]) j[std::string(fp8_operand_name(static_cast<Fp8Operand>(i)))] = o.specs[i]->str();
  }
  return j;
}

// The inverse, from a name ("nvfp4": the recipe's defaults) or an object of which only "recipe" is
// needed. A key the recipe does not read is refused (a typo would otherwise change nothing).
QuantOptions parse_recipe(const nlohmann::json& j) {
  QuantOptions o;
  if (j.is_string()) {
    o.recipe = QuantRecipe::parse(j.get<std::string>());
    return o;
  }
  o.recipe = QuantRecipe::parse(j.at("recipe").get<std::string>());
  const nlohmann::json known = recipe_json(o);
  for (const auto& [key, value] : j.items()) {
    if (const std::optional<Fp8Operand> operand = parse_fp8_operand(key)) {
      o.specs[static_cast<std::size_t>(*operand)] = QuantSpec::parse(value.get<std::string>());
      continue;
    }
    if (!known.contains(key) && key != "seed") {
      throw std::invalid_argument("the " + std::string(o.recipe.name()) + " recipe has no parameter \"" + key + "\"");
    }
    if (key == "rht") o.nvfp4_rht = value.get<bool>();
    if (key == "sr") o.nvfp4_sr = value.get<bool>();
    if (key == "2d_weights") o.nvfp4_2d_weights = value.get<bool>();
    if (key == "mx_scale") o.mx_rule = parse_scale_rule(value.get<std::string>());
    if (key == "seed") o.seed = json_value<std::uint64_t>(value, key);
    if (key == "format") o.format = parse_fp8_format(value.get<std::string>());
    if (key == "margin") o.margin = json_value<int>(value, key);
    if (key == "history") o.amax_history = json_value<std::int64_t>(value, key);
    if (key == "reduction") o.reduction = parse_amax_reduction(value.get<std::string>());
    if (key == "block") o.block = json_value<std::int64_t>(value, key);
  }
  if (j.contains("seed") && !o.keeps_rounding_count()) {
    throw std::invalid_argument("the " + std::string(o.recipe.name()) +
                                " recipe has no parameter \"seed\" (no operand of it rounds stochastically)");
  }
  o.check();
  return o;
}

}  // namespace

bool PrecisionPlan::quantizes() const {
  return std::any_of(layers.begin(), layers.end(), [](const auto& l) { return l.second == LayerPrecision::quantized; });
}

const QuantOptions& PrecisionPlan::recipe_of(const std::string& path) const {
  const auto own = recipes.find(path);
  return own == recipes.end() ? fp8 : own->second;
}

std::string quantized_level_name(const QuantOptions& recipe) {
  return recipe.microscaled() ? std::string(recipe.recipe.name()) : layer_precision_name(LayerPrecision::quantized, DType::bf16);
}

std::string PrecisionPlan::levels_json() const {
  nlohmann::json j = {{"low", layer_precision_name(LayerPrecision::low, low)}, {"layers", nlohmann::json::object()}};
  for (const auto& [path, p] : layers) {
    j["layers"][path] = p == LayerPrecision::quantized ? quantized_level_name(recipe_of(path)) : layer_precision_name(p, low);
  }
  return j.dump();
}

std::string PrecisionPlan::json() const {
  nlohmann::json j = nlohmann::json::parse(levels_json());
  bool any_quantized = false;
  for (const auto& [path, p] : layers) {
    if (p != LayerPrecision::quantized) continue;
    any_quantized = true;
    const auto own = recipes.find(path);
    if (own != recipes.end()) j["layers"][path] = {{"level", quantized_level_name(own->second)}, {"recipe", recipe_json(own->second)}};
  }
  if (any_quantized) j["quantized"] = recipe_json(fp8);
  return j.dump();
}

bool PrecisionPlan::names_recipe(std::string_view json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    return j.is_object() && (j.contains("quantized") || j.contains("fp8"));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("precision plan: ") + e.what());
  }
}

PrecisionPlan PrecisionPlan::parse(std::string_view json) {
  std::string where = "\"low\"";
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    PrecisionPlan plan;
    const std::string low = j.at("low").get<std::string>();
    if (low != "bf16" && low != "fp16") throw std::invalid_argument("must be bf16 or fp16, got '" + low + "'");
    plan.low = low == "fp16" ? DType::f16 : DType::bf16;
    // The quantized layers' recipe: "quantized" (plans before it was named so said "fp8").
    if (j.contains("quantized") && j.contains("fp8")) throw std::invalid_argument("\"quantized\" and \"fp8\" both give the recipe: give one");
    for (const char* key : {"quantized", "fp8"}) {
      where = std::string("\"") + key + "\"";
      if (j.contains(key)) plan.fp8 = parse_recipe(j.at(key));
    }
    for (const auto& [path, p] : j.at("layers").items()) {
      where = "layer \"" + path + "\"";
      const std::string word = p.is_object() ? p.at("level").get<std::string>() : p.get<std::string>();
      // A quantized layer's word names its recipe: "fp8" (the plan's FP8 recipe; before levels were named
      // so, any quantized layer), or a microscaled recipe's name (the plan's recipe where it is that one,
      // else that recipe with its defaults).
      const QuantRecipe* named = QuantRecipe::find(word);
      if (named != nullptr && named->info().microscaled()) {
        plan.layers[path] = LayerPrecision::quantized;
        if (!(*named == plan.fp8.recipe)) plan.recipes[path] = parse_recipe(nlohmann::json(word));
      } else {
        plan.layers[path] = parse_layer_precision(word, plan.low);
      }
      if (p.is_object() && p.contains("recipe")) {
        if (plan.layers[path] != LayerPrecision::quantized) throw std::invalid_argument("only a quantized layer has a recipe");
        plan.recipes[path] = parse_recipe(p.at("recipe"));
        if (named != nullptr && !(plan.recipes[path].recipe == *named)) {
          throw std::invalid_argument("its level says " + word + ", its recipe " + std::string(plan.recipes[path].recipe.name()));
        }
      }
    }
    return plan;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("not a precision plan (" + where + "): " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
}

std::string PrecisionPlan::str(bool every_layer) const {
  const auto named = [&](const std::string& path) {
    const auto why = reasons.find(path);
    const auto own = recipes.find(path);
    std::string name = path;
    if (why != reasons.end()) name.append(" (").append(why->second).append(")");
    if (own != recipes.end()) name.append(" [").append(own->second.recipe.name()).append("]");
    return name;
  };
  std::string s;
  for (const LayerPrecision p : {LayerPrecision::quantized, LayerPrecision::low, LayerPrecision::f32}) {
    std::vector<std::string> all, explained;
    for (const auto& [path, q] : layers) {
      if (q != p) continue;
      all.push_back(named(path));
      if (reasons.count(path) > 0 || recipes.count(path) > 0) explained.push_back(named(path));
    }
    if (all.empty()) continue;
    const bool first = s.empty();  // the first level says of how many
    // (Quantized layers by their recipe's name where it is a microscaled one: an FP4 layer is not "fp8".)
    const bool named_recipe = p == LayerPrecision::quantized && fp8.microscaled();
    s += (first ? "" : "; ") + (named_recipe ? std::string(fp8.recipe.name()) : layer_precision_name(p, low)) + " in " +
         std::to_string(all.size());
    if (first) s += " of " + std::to_string(layers.size()) + " layers";
    if (p == LayerPrecision::quantized && !named_recipe) s.append(" (").append(fp8.recipe.name()).append(")");
    const std::vector<std::string>& shown = all.size() <= 4 ? all : explained;
    for (std::size_t i = 0; i < shown.size() && i < 4; ++i) s += (i == 0 ? ": " : ", ") + shown[i];
    if (shown.size() > 4) s += " and " + std::to_string(shown.size() - 4) + " more";
  }
  if (!every_layer) return s;
  for (const auto& [path, p] : layers) {
    if (p != LayerPrecision::quantized) {
      s += "\n  " + named(path) + ": " + layer_precision_name(p, low);
      continue;
    }
    const QuantOptions& r = recipe_of(path);
    s += "\n  " + named(path) + ": " + (r.microscaled() ? "" : "fp8 ") + r.str();
    for (std::size_t i = 0; i < kFp8Operands; ++i) {
      const auto operand = static_cast<Fp8Operand>(i);
      s.append("\n    ").append(fp8_operand_name(operand)).append(": ").append(r.spec(operand).str());
    }
  }
  return s;
}

std::vector<std::pair<std::string, nn::Module*>> product_layers(nn::Module& model) {
  std::vector<std::pair<std::string, nn::Module*>> out;
  for (const auto& [path, m] : model.named_modules()) {
    if (dynamic_cast<nn::Linear*>(m) != nullptr || dynamic_cast<nn::Conv2d*>(m) != nullptr) out.emplace_back(path, m);
  }
  return out;
}

namespace {

// A reason for a layer one of the policy's lists names: "fp32 layers", or "fp32 layers: blocks.0" when
// the list names a module around it.
std::string named_by(const std::string& list, const std::string& path, const std::string& entry) {
  return entry == path ? list : list + ": " + entry;
}

// The block a layer's path lies in: the path up to its first all-digit part ("blocks.3" of
// "blocks.3.mlp.fc"), or "" for none.
std::string block_of(const std::string& path) {
  for (std::size_t start = 0; start < path.size();) {
    const std::size_t end = std::min(path.find('.', start), path.size());
    const std::string_view part(path.data() + start, end - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return path.substr(0, end);
    }
    start = end + 1;
  }
  return "";
}

// The linear layers (paths in module order) `kept` keeps in bf16, each with why.
std::map<std::string, std::string> kept_in_bf16(const std::vector<std::string>& linear, KeptLayers kept) {
  std::map<std::string, std::string> out;
  if (linear.empty() || kept == KeptLayers::none) return out;
  if (kept == KeptLayers::first_last) {
    out[linear.front()] = "first layer";
    out[linear.back()] = "last layer";
    return out;
  }
  // The blocks in order (a linear layer outside any numbered block is one of its own where the model
  // has none; where it has some, such a layer after the last one is kept with it, as a head is).
  std::vector<std::string> blocks;
  for (const std::string& path : linear) {
    const std::string b = block_of(path);
    if (!b.empty() && std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);
  }
  const bool numbered = !blocks.empty();
  if (!numbered) blocks = linear;
  const auto n = static_cast<std::int64_t>(blocks.size());
  const std::int64_t last = std::max<std::int64_t>(1, (15 * n + 50) / 100);  // about 15%, at least one
  const std::string why = "last " + std::to_string(last) + " of " + std::to_string(n) + " blocks";
  const std::size_t from = blocks.size() - static_cast<std::size_t>(last);
  bool after = false;
  for (const std::string& path : linear) {
    const std::string b = numbered ? block_of(path) : path;
    const auto at = std::find(blocks.begin(), blocks.end(), b);
    if (at != blocks.end()) after = static_cast<std::size_t>(at - blocks.begin()) >= from;
    if (after) out[path] = why;
  }
  out[linear.front()] = "first layer";
  return out;
}

}  // namespace

PrecisionPlan plan_precision(nn::Module& model, const PrecisionPolicy& policy) {
  PrecisionPlan plan;
  plan.low = policy.compute == DType::f16 ? DType::f16 : DType::bf16;
  const auto modules = model.named_modules();
  if (policy.fp8) {
    plan.fp8 = *policy.fp8;
    plan.fp8.check();
    for (const auto* list : {&policy.fp8_layers.bf16_layers, &policy.fp8_layers.fp8_layers}) {
      for (const std::string& p : *list) {
        const bool found = std::any_of(modules.begin(), modules.end(), [&](const auto& m) { return nn::path_within(m.first, p); });
        if (!found) throw std::invalid_argument("fp8 policy: no module of the model is named '" + p + "'");
      }
    }
  }
  const auto layers = product_layers(model);
  std::vector<std::string> linear;
  for (const auto& [path, m] : layers) {
    if (dynamic_cast<nn::Linear*>(m) != nullptr) linear.push_back(path);
  }
  const std::map<std::string, std::string> kept =
      policy.fp8 ? kept_in_bf16(linear, policy.fp8_layers.kept.value_or(policy.fp8->recipe.info().kept))
                 : std::map<std::string, std::string>{};
  for (const auto& [path, m] : layers) {
    if (policy.compute == DType::f32) {
      plan.layers[path] = LayerPrecision::f32;
      continue;
    }
    LayerPrecision level = LayerPrecision::low;
    std::string why;
    const auto at = std::find(linear.begin(), linear.end(), path);
    if (policy.fp8 && at != linear.end()) {
      const nn::Fp8Policy& f = policy.fp8_layers;
      level = LayerPrecision::quantized;
      if (const auto k = kept.find(path); k != kept.end()) level = LayerPrecision::low, why = k->second;
      for (const std::string& p : f.bf16_layers) {
        if (nn::path_within(path, p)) level = LayerPrecision::low, why = named_by("bf16 layers", path, p);
      }
      for (const std::string& p : f.fp8_layers) {
        if (nn::path_within(path, p)) level = LayerPrecision::quantized, why = named_by("fp8 layers", path, p);
      }
    }
    // A layer kept in f32 on the module itself, or under a module that is (before the trainer came).
    for (const auto& [outer, o] : modules) {
      if (o->kept_in_f32() && (outer.empty() || nn::path_within(path, outer))) {
        level = LayerPrecision::f32;
        why = outer == path ? "keep_in_f32" : "keep_in_f32 on " + (outer.empty() ? std::string("the model") : outer);
      }
    }
    for (const std::string& p : policy.f32_layers) {
      if (nn::path_within(path, p)) level = LayerPrecision::f32, why = named_by("fp32 layers", path, p);
    }
    plan.layers[path] = level;
    if (!why.empty()) plan.reasons[path] = why;
  }
  return plan;
}

namespace {

// Sets layer `m` to level p, FP8 by `fp8` where it runs in fp8.
void set_layer_precision(nn::Module& m, const std::string& path, LayerPrecision p, const QuantOptions& fp8) {
  auto* linear = dynamic_cast<nn::Linear*>(&m);
  if (p == LayerPrecision::quantized && linear == nullptr) {
    throw std::invalid_argument("precision plan: " + path + " is not a linear layer; only linear layers run in fp8");
  }
  if (p == LayerPrecision::f32) {
    m.keep_in_f32();
  } else if (m.kept_in_f32()) {  // (an autocast policy of the layer's own, not all-f32, stays)
    m.set_precision_override(std::nullopt);
  }
  if (linear == nullptr) return;
  if (p == LayerPrecision::quantized && !linear->fp8()) linear->enable_fp8(fp8);
  if (p == LayerPrecision::quantized && !(linear->fp8()->options() == fp8)) {
    throw std::invalid_argument("precision plan: " + path + " runs fp8 by " + linear->fp8()->options().str() + " already, not by " + fp8.str());
  }
  if (linear->fp8()) linear->set_fp8_active(p == LayerPrecision::quantized);
}

void apply_layer(const std::vector<std::pair<std::string, nn::Module*>>& layers, const PrecisionPlan& plan, const std::string& path) {
  const auto it = std::find_if(layers.begin(), layers.end(), [&](const auto& l) { return l.first == path; });
  const auto level = plan.layers.find(path);
  if (it == layers.end() || level == plan.layers.end()) {
    throw std::invalid_argument("precision plan: '" + path + "' is no linear or convolution layer of this model");
  }
  // Each linear layer its own stochastic-rounding stream: its index among the linear layers.
  std::uint64_t index = 0;
  for (auto l = layers.begin(); l != it; ++l) index += dynamic_cast<nn::Linear*>(l->second) != nullptr ? 1 : 0;
  QuantOptions mine = plan.recipe_of(path);
  mine.seed += index + 1;
  set_layer_precision(*it->second, path, level->second, mine);
}

}  // namespace

void apply_precision_plan(nn::Module& model, const PrecisionPlan& plan) {
  const auto layers = product_layers(model);
  for (const auto& entry : plan.layers) apply_layer(layers, plan, entry.first);
}

void apply_layer_precision(nn::Module& model, const PrecisionPlan& plan, const std::string& path) {
  apply_layer(product_layers(model), plan, path);
}

}  // namespace mantissa::train
