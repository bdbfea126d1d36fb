#include <torch/extension.h>
// torch 2.9's declaration (the return type, cudaError_t, is an int-sized enum and is not part of the mangled name)
namespace c10 { namespace cuda { int SetDevice(int device); } }
int set_device(int d) { return c10::cuda::SetDevice(d); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("set_device", &set_device); }
