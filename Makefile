PYTHON ?= python3

.PHONY: install test test-fast demo demo-seg gpu-check gpu-wheels clean

# The OpenMMLab stack: upstream (mmcv 2.1.0, mmdet 3.3.0, ...) or onedl (the
# maintained fork); exact versions in requirements/constraints/$(STACK).txt.
STACK ?= upstream

install:  ## set up everything in the active Python environment (STACK=upstream|onedl)
	STACK=$(STACK) bash tools/install.sh

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file per
# worker at a time, in the order tests/conftest.py gives (slow files first);
# OpenMP threads sleep rather than spin while they wait, as two workers share
# the cores; glibc keeps freed memory for reuse instead of mapping and
# page-faulting large tensors afresh (the allocator section of
# docs/benchmarks.md); bytecode is cached even where PYTHONDONTWRITEBYTECODE
# is set, so the suite's fresh interpreters do not each recompile the
# package.
TEST_WORKERS ?= 2
KEEP_FREED_MEMORY = MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184
PYTEST = OMP_WAIT_POLICY=PASSIVE $(KEEP_FREED_MEMORY) PYTHONDONTWRITEBYTECODE= $(PYTHON) -m pytest tests -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test:  ## the whole test suite
	$(PYTEST)

test-fast:  ## skip the slow end-to-end runs
	$(PYTEST) -m "not slow"

demo:  ## the quick start: synthetic COCO, train Tiny Mask R-CNN, COCO AP, pictures
	bash tools/quickstart.sh

demo-seg:  ## segmentation quick start: synthetic label maps, Tiny Semantic FPN, mIoU, pictures
	bash tools/quickstart_seg.sh

gpu-check:  ## GPU acceptance run (build, op/model/AMP tests, sanitizers, benchmarks): gpu_check_out/gpu_report.md
	bash tools/gpu_check.sh

gpu-wheels:  ## download what a bare GPU machine lacks into .whl/ for tools/gpu_session.sh (docs/gpu.md)
	bash tools/gpu/download_wheels.sh

clean:
	rm -rf build mmlaplacian/_ext*.so work_dirs .pytest_cache
