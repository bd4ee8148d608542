// Numbers in the JSON documents mantissa reads back (checkpoint metadata, telemetry records, the
// adaptive controller's state, a run's settings) go through one function: a field that should be an
// integer must be a JSON integer within the range of the type it is used in, a real one a finite
// number; anything else (1e300 where an int belongs, 2^40 for an int, a fraction for a count, a string)
// is an error naming the field. nlohmann's own get<int>() converts a float with a cast: silently
// truncated, or undefined past the range. (Include this header only where nlohmann/json is at hand:
// the library's other headers do not need it.)
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace mantissa {

// The value v, named `what` in errors, as a T.
template <class T>
T json_value(const nlohmann::json& v, const std::string& what) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned() && std::in_range<T>(v.get<std::uint64_t>())) return static_cast<T>(v.get<std::uint64_t>());
    if (v.is_number_integer() && !v.is_number_unsigned() && std::in_range<T>(v.get<std::int64_t>())) {
      return static_cast<T>(v.get<std::int64_t>());
    }
    throw std::invalid_argument(what + ": " + v.dump().substr(0, 40) + " is not an integer in the range " +
                                std::to_string(std::numeric_limits<T>::min()) + ".." + std::to_string(std::numeric_limits<T>::max()));
  } else {
    const double d = v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(d) && std::abs(d) <= static_cast<double>(std::numeric_limits<T>::max())) return static_cast<T>(d);
    throw std::invalid_argument(what + ": " + v.dump().substr(0, 40) + " is not a finite number");
  }
}

// Field `key` of a JSON object as a T; missing, or not an object: an error naming the key.
template <class T>
T json_number(const nlohmann::json& object, const std::string& key) {
  if (!object.is_object()) throw std::invalid_argument("'" + key + "': not in a JSON object");
  const auto it = object.find(key);
  if (it == object.end()) throw std::invalid_argument("'" + key + "' is missing");
  return json_value<T>(*it, "'" + key + "'");
}

}  // namespace mantissa
