"""Studies and benchmarks of LaplacianFormer, outside the installed package.

Run each from the repository root as ``python -m benchmarks.<name>``
(``backbone``, ``forms``, ``ops``, ``segmentors``, ``time_breakdown``,
``qk_distance``, ``solver_study``, ``kernel_ablation``, ``model_complexity``,
``onnx_parity``, ``runtime_accuracy``, ``runtime_speed``). They share :mod:`benchmarks.harness`
(case subprocesses, memory readings, the timing loop), :mod:`benchmarks.models`
(the backbones compared) and :mod:`benchmarks.tables`.
"""
