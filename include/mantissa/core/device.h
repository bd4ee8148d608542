// Where a tensor's memory lives. Only the CPU exists now; the enum leaves room for a CUDA backend added
// as a new folder of kernels (src/backend/cuda) without touching the op front-ends.
#pragma once

#include <string>

namespace mantissa {

enum class DeviceType : unsigned char { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  std::string str() const;
  friend constexpr bool operator==(const Device&, const Device&) = default;
};

}  // namespace mantissa
