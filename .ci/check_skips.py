"""Fail CI when a test skipped for a reason other than a missing GPU.

    python .ci/check_skips.py REPORT.xml [REPORT.xml ...]

Reads pytest's JUnit XML reports (``--junitxml``), prints every skip
reason with its count, and exits 1 when any reason names neither CUDA nor
a GPU: everything else the suite needs is installed in CI, so a test that
skips there has not been run.
"""
import collections
import re
import sys
import xml.etree.ElementTree as ElementTree
from typing import Iterator, List, Tuple

ALLOWED = re.compile(r'\b(CUDA|GPU)\b')


def skips(path: str) -> Iterator[Tuple[str, str]]:
    """``(test, reason)`` for each skipped test of a report; a file skipped
    as a whole while it was collected counts once."""
    for case in ElementTree.parse(path).iter('testcase'):
        for skipped in case.iter('skipped'):
            reason = skipped.get('message', '')
            if reason == 'collection skipped':  # the reason is in the text
                reason = (skipped.text or '').strip()
            test = f'{case.get("classname", "")}::{case.get("name", "")}'
            yield test, reason


def main(paths: List[str]) -> int:
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    reasons = collections.Counter()
    not_allowed = []
    for path in paths:
        for test, reason in skips(path):
            reasons[reason] += 1
            if not ALLOWED.search(reason):
                not_allowed.append(f'{test}: {reason}')
    for reason, count in sorted(reasons.items()):
        print(f'{count:5d} skipped: {reason}')
    if not_allowed:
        print(f'{len(not_allowed)} tests skipped for another reason than a '
              'missing GPU; CI installs everything else they need:',
              *not_allowed, sep='\n  ', file=sys.stderr)
        return 1
    print(f'{sum(reasons.values())} skipped, each for want of a GPU')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
