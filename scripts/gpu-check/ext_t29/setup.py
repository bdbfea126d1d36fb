# The seed's failure, reproduced against the real CUDA torch: an extension whose code was compiled against torch 2.9's
# c10::cuda::SetDevice(int). Newer torch exports SetDevice(signed char, bool) instead, so the mangled name
# _ZN3c104cuda9SetDeviceEi is left undefined, exactly as flash_attn 2.8.3+cu128torch2.9 under torch 2.11.
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

lib = os.path.join(os.path.dirname(torch.__file__), "lib")
setup(name="lw_t29_shape", version="2.8.3+cu128torch2.9",
      ext_modules=[CppExtension("lw_t29_shape", ["t29.cpp"], library_dirs=[lib], libraries=["c10_cuda"])],
      cmdclass={"build_ext": BuildExtension})
