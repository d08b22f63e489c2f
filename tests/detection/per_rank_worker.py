"""One torchrun worker of a tool in tools/, with ``{rank}`` in the tool's
arguments replaced by the worker's rank.

Giving each rank its own work directory shows which files each rank
writes: with one writer per file, rank 1's stays empty. ``dist_test.sh``
and ``dist_train.sh`` start their workers this way when ``$PYTHON`` is
``per_rank_python.sh``:

    PYTHON=tests/detection/per_rank_python.sh REAL_PYTHON=python \\
        bash tools/dist_test.sh CONFIG CKPT 2 --work-dir DIR/rank{rank}
"""
import os
import runpy
import sys

if __name__ == '__main__':
    tool, *arguments = sys.argv[1:]
    rank = os.environ['RANK']
    sys.argv = [tool] + [a.replace('{rank}', rank) for a in arguments]
    runpy.run_path(tool, run_name='__main__')
