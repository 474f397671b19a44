// Checks that the CUDA runtime links and reports devices; skips without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/device_info.h"

namespace {

TEST(CudaDevice, DescribesEveryDevice) {
  std::string why;
  const int count = tq::kernels::cuda::DeviceCount(&why);
  if (count == 0) GTEST_SKIP() << "no CUDA device: " << why;
  for (int i = 0; i < count; ++i) {
    const std::string desc = tq::kernels::cuda::DeviceDescription(i);
    EXPECT_NE(desc.find("sm_"), std::string::npos) << desc;
  }
  EXPECT_EQ(tq::kernels::cuda::DeviceDescription(count), "");
}

}  // namespace
