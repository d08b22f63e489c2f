PYTHON ?= python3

.PHONY: install test test-fast test-adapters demo demo-seg executorch-runner gpu-check gpu-wheels gpu-mmcv clean

# The OpenMMLab stack: upstream (mmcv 2.1.0, mmdet 3.3.0, ...) or onedl (the
# maintained fork); exact versions in requirements/constraints/$(STACK).txt.
STACK ?= upstream

# make executorch-runner TARGET=aarch64 cross-compiles for 64-bit Arm Linux.
TARGET ?= native

install:  ## set up everything in the active Python environment (STACK=upstream|onedl)
	STACK=$(STACK) bash tools/install.sh

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file per
# worker at a time (tests/conftest.py groups them, slow files first). OpenMP
# threads sleep rather than spin while they wait (OMP_WAIT_POLICY=PASSIVE):
# two workers and the tools they start share the cores, and spinning threads
# would slow each other down many times over. tests/adapters runs in its own
# environment (make test-adapters).
TEST_WORKERS ?= 2
PYTEST = OMP_WAIT_POLICY=PASSIVE $(PYTHON) -m pytest tests --ignore=tests/adapters -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test:  ## the whole test suite
	$(PYTEST)

test-fast:  ## skip the slow end-to-end runs
	$(PYTEST) -m "not slow"

test-adapters:  ## timm, Hugging Face and segmentation-models-pytorch tests, in their own virtual environment (.venv-adapters)
	PYTHON=$(PYTHON) bash tools/test_adapters.sh

demo:  ## the quick start: synthetic COCO, train Tiny Mask R-CNN, COCO AP, pictures
	bash tools/quickstart.sh

demo-seg:  ## segmentation quick start: synthetic label maps, Tiny Semantic FPN, mIoU, pictures
	bash tools/quickstart_seg.sh

executorch-runner:  ## the C++ ExecuTorch runner with our kernels, no Python (TARGET=native|aarch64): build/executorch_runner*/
	PYTHON=$(PYTHON) bash tools/deployment/build_executorch_runner.sh $(TARGET)

gpu-check:  ## GPU acceptance run (build, op/model/AMP tests, sanitizers, benchmarks): gpu_check_out/gpu_report.md
	bash tools/gpu_check.sh

gpu-wheels:  ## download what a bare GPU machine lacks into .whl/ for tools/gpu_session.sh (docs/gpu.md)
	bash tools/gpu/download_wheels.sh

gpu-mmcv:  ## build mmcv's CUDA extension here for the GPU machine, into .whl/ (after gpu-wheels; ~30 min on 2 cores)
	bash tools/gpu/prebuild_mmcv.sh

clean:
	rm -rf build mmlaplacian/_ext*.so mmlaplacian/_executorch_kernels*.so work_dirs .pytest_cache
