"""One torchrun worker of a tool in tools/, with ``{rank}`` in the tool's
arguments replaced by the worker's rank.

Giving each rank its own work directory shows which files each rank
writes: with one writer per file, rank 1's stays empty.

    python -m torch.distributed.run --nproc_per_node 2 per_rank_worker.py \
        tools/test.py CONFIG CKPT --work-dir DIR/rank{rank} --launcher pytorch
"""
import os
import runpy
import sys

if __name__ == '__main__':
    tool, *arguments = sys.argv[1:]
    rank = os.environ['RANK']
    sys.argv = [tool] + [a.replace('{rank}', rank) for a in arguments]
    runpy.run_path(tool, run_name='__main__')
