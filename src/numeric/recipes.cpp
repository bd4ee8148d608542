// The recipe table's lookups; see mantissa/numeric/recipes.h.
#include "mantissa/numeric/recipes.h"

#include <stdexcept>
#include <vector>

namespace mantissa {

std::span<const QuantRecipe> QuantRecipe::all() {
  static const std::vector<QuantRecipe> every = [] {
    std::vector<QuantRecipe> out;
    for (std::uint8_t i = 0; i < std::size(kRecipes); ++i) out.push_back(QuantRecipe(i));
    return out;
  }();
  return every;
}

const QuantRecipe* QuantRecipe::find(std::string_view name) {
  for (const QuantRecipe& r : all()) {
    if (r.name() == name) return &r;
  }
  return nullptr;
}

QuantRecipe QuantRecipe::parse(std::string_view name) {
  if (const QuantRecipe* r = find(name)) return *r;
  throw std::invalid_argument("'" + std::string(name) + "' is not a quantization recipe (" +
                              recipe_names([](const RecipeInfo&) { return true; }) + ")");
}

std::string recipe_names(bool (*keep)(const RecipeInfo&), std::string_view last_joint) {
  std::vector<std::string_view> names;
  for (const RecipeInfo& r : kRecipes) {
    if (keep(r)) names.push_back(r.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? std::string(last_joint) : std::string(", ");
    out += names[i];
  }
  return out;
}

bool is_microscaled(const RecipeInfo& r) { return r.microscaled(); }

}  // namespace mantissa
