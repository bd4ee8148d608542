// The fused attention each device type registered (see fused_attention.h).
#include "fused_attention.h"

#include <array>

#include "registry.h"

namespace mantissa::detail {
namespace {
std::array<FusedAttention, 2> registered;  // by DeviceType; set once, at the backends' registration
}  // namespace

void set_fused_attention(DeviceType type, const FusedAttention& fused) {
  registered.at(static_cast<std::size_t>(type)) = fused;
}

const FusedAttention* fused_attention(DeviceType type) {
  (void)impl_for(Device{type, 0});  // the backends register at the first kernel call, perhaps not yet made
  const FusedAttention& f = registered.at(static_cast<std::size_t>(type));
  return f.supports != nullptr ? &f : nullptr;
}

}  // namespace mantissa::detail
