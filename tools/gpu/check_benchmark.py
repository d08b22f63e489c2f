"""Fail unless every case of a ``python -m benchmarks.backbone`` run ran.

The benchmark tables a case that erred or ran out of time or memory and
still exits 0; the GPU acceptance run needs all of them.

    python tools/gpu/check_benchmark.py work_dirs/benchmark_backbone/results.json
"""
import json
import sys


def main(path: str) -> int:
    with open(path, encoding='utf-8') as f:
        results = json.load(f)
    bad = [r for r in results if r.get('status') != 'ok']
    for r in bad:
        print(r.get('model'), r.get('size'), r.get('mode'), r.get('status'),
              r.get('message', ''))
    print(f'{len(results) - len(bad)} of {len(results)} cases ran')
    return 1 if bad or not results else 0


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
