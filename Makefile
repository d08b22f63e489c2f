PYTHON ?= python3

.PHONY: install test test-fast demo demo-seg gpu-check clean

install:  ## set up everything in the active Python environment
	bash tools/install.sh

test:  ## the whole test suite
	$(PYTHON) -m pytest tests -q

test-fast:  ## skip the slow end-to-end runs
	$(PYTHON) -m pytest tests -q -m "not slow"

demo:  ## the quick start: synthetic COCO, train Tiny Mask R-CNN, COCO AP, pictures
	bash tools/quickstart.sh

demo-seg:  ## segmentation quick start: synthetic label maps, Tiny Semantic FPN, mIoU, pictures
	bash tools/quickstart_seg.sh

gpu-check:  ## GPU acceptance run (build, op/model/AMP tests, sanitizers, benchmarks): gpu_check_out/gpu_report.md
	bash tools/gpu_check.sh

clean:
	rm -rf build mmlaplacian/_ext*.so work_dirs .pytest_cache
