// The version mark of mmlaplacian._executorch_kernels, the library our
// ExecuTorch kernels are built into: the executorch release it was built
// against (setup.py defines the macro), which load_executorch_kernels()
// compares with the installed one, since the runtime's types have no stable
// ABI across releases. An application that compiles our kernels into its own
// runtime leaves this file out.
extern "C" const char* mmlaplacian_executorch_version() {
#ifdef MMLAPLACIAN_EXECUTORCH_VERSION
  return MMLAPLACIAN_EXECUTORCH_VERSION;
#else
  return "";
#endif
}
