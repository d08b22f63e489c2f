PYTHON ?= python3

.PHONY: install test test-fast demo gpu-check clean

install:  ## set up everything in the active Python environment
	bash tools/install.sh

test:  ## the whole test suite
	$(PYTHON) -m pytest tests -q

test-fast:  ## skip the slow end-to-end runs
	$(PYTHON) -m pytest tests -q -m "not slow"

demo:  ## the quick start: synthetic COCO, train Tiny Mask R-CNN, COCO AP, pictures
	bash tools/quickstart.sh

gpu-check:  ## CUDA build, CUDA tests and op benchmarks on a GPU machine
	bash tools/gpu_check.sh

clean:
	rm -rf build mmlaplacian/_ext*.so work_dirs .pytest_cache
