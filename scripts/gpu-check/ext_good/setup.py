# A real CUDA extension built with torch.utils.cpp_extension against the installed torch.
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="lw_good_cuda", version="1.0", ext_modules=[CUDAExtension("lw_good_cuda", ["good.cpp", "good_kernel.cu"])],
      cmdclass={"build_ext": BuildExtension})
