// The Python module mmlaplacian._ext. Importing it loads this library, whose
// static initialisers register the operators (ops.cpp) and their kernels;
// the module itself only reports how the CUDA kernels were built.
#include <Python.h>

#ifdef MMLAPLACIAN_WITH_CUDA
#include "cuda_build_info.hpp"
#endif

// The name is setup.py's extension name, mmlaplacian._ext.
PyMODINIT_FUNC PyInit__ext(void) {
  static PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT,
      "_ext",
      "Compiled CPU and CUDA kernels of torch.ops.mmlaplacian.",
      -1,
      nullptr,
  };
  PyObject* module = PyModule_Create(&module_def);
#ifdef MMLAPLACIAN_WITH_CUDA
  if (module != nullptr &&
      (PyModule_AddIntConstant(module, "cuda_runtime_version",
                               mmlaplacian::cuda_runtime_version()) < 0 ||
       PyModule_AddStringConstant(module, "cuda_arch_list",
                                  mmlaplacian::cuda_arch_list()) < 0)) {
    Py_DECREF(module);
    return nullptr;
  }
#endif
  return module;
}
