// The copy rate behind the bandwidth figures of `mantissa bench --model` (copy_rate.h).
#include "copy_rate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "mantissa/backend/cuda.h"
#include "mantissa/core/storage.h"
#include "mantissa/core/tensor.h"

namespace mantissa::cli {

double copy_bytes_per_second(Device device, int threads) {
  constexpr std::int64_t kBytes = std::int64_t{256} << 20;
  const Tensor src = Tensor::zeros({kBytes}, DType::e4m3, device);  // one byte a value
  const Tensor dst = Tensor::zeros({kBytes}, DType::e4m3, device);
  const bool gpu = device.type == DeviceType::cuda;
  const auto copy = [&] {
    if (gpu) {
      copy_bytes(dst.storage(), 0, src.storage(), 0, kBytes);
      cuda_synchronize();
      return;
    }
    const auto* from = static_cast<const char*>(src.data());
    auto* to = static_cast<char*>(dst.data());
    const std::int64_t chunk = (kBytes + threads - 1) / threads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const std::int64_t at = t * chunk, n = std::min(chunk, kBytes - at);
      if (n > 0) std::memcpy(to + at, from + at, static_cast<std::size_t>(n));
    }
  };
  copy();
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * static_cast<double>(kBytes) / s);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace mantissa::cli
