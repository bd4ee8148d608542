// A build without NCCL (no CUDA backend, or no nccl.h in the CUDA toolkit it was configured with): the
// GPU gradient reduction says why it is missing instead of being silently replaced.
#include "mantissa/dist/device_reducer.h"

namespace mantissa::dist {

NcclInfo nccl_info() {
  NcclInfo info;
  info.unavailable = MANTISSA_NCCL_ABSENT_REASON;
  return info;
}

std::unique_ptr<DeviceReducer> make_nccl_reducer(ProcessGroup&, Device) {
  throw DistributedError(std::string("data parallel on GPUs needs NCCL: ") + MANTISSA_NCCL_ABSENT_REASON);
}

}  // namespace mantissa::dist
