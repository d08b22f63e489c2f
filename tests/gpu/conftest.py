"""The GPU acceptance tests: CUDA against the CPU, AMP training, the CUDA
build, the sanitizers on planted bugs. Every GPU test is marked ``cuda`` and
skipped without a CUDA device; the tests of the acceptance run's own tools
(``tools/gpu_check.sh`` and its helpers) run on any machine."""
