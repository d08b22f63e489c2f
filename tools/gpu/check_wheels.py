"""Check a folder of carried packages against the GPU machine's image.

Every requirement (``Requires-Dist``) of every wheel and source archive in
the folder, for Python 3.12 (``--python-version``) on Linux x86_64, must be
met by a carried package (at a version it accepts) or by a package of the
image (``tools/gpu/image_packages.txt``); each name may be carried once.

    python tools/gpu/check_wheels.py .whl

Exits 1, naming what is missing, if not.
"""
from __future__ import annotations

import argparse
import email.parser
import os
import os.path as osp
import re
import sys
import tarfile
import zipfile
from typing import Dict, List, Tuple

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

IMAGE_LIST = osp.join(osp.dirname(osp.abspath(__file__)),
                      'image_packages.txt')
# The machine's Linux x86_64, no extras (and python_version, from the
# command line).
TARGET = dict(sys_platform='linux', platform_system='Linux',
              platform_machine='x86_64', os_name='posix',
              implementation_name='cpython',
              platform_python_implementation='CPython', extra='')
# The image's OpenCV is the headless build: the same cv2 module.
PROVIDED_BY = {'opencv-python': 'opencv-python-headless'}


def image_packages(path: str = IMAGE_LIST) -> set:
    with open(path, encoding='utf-8') as f:
        return {canonicalize_name(line.strip()) for line in f
                if line.strip() and not line.startswith('#')}


def wheel_metadata(path: str) -> str:
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist()
                    if re.fullmatch(r'[^/]+\.dist-info/METADATA', n))
        return z.read(name).decode('utf-8')


def sdist_metadata(path: str) -> str:
    """PKG-INFO, with the egg-info's requires.txt as Requires-Dist lines
    when PKG-INFO lists none (older setuptools wrote them only there)."""
    with tarfile.open(path) as t:
        names = t.getnames()
        top = min(names, key=len).split('/')[0]
        text = t.extractfile(f'{top}/PKG-INFO').read().decode('utf-8')
        if 'Requires-Dist:' in text:
            return text
        requires = [n for n in names if n.endswith('.egg-info/requires.txt')]
        if requires:
            lines = t.extractfile(requires[0]).read().decode().splitlines()
            section_free = []
            for line in lines:
                if line.startswith('['):  # an extra's section: not needed
                    break
                if line.strip():
                    section_free.append(f'Requires-Dist: {line.strip()}')
            text = text.rstrip('\n') + '\n' + '\n'.join(section_free) + '\n'
        return text


def read_folder(folder: str) -> Tuple[Dict[str, Version], List[Tuple]]:
    """Carried name -> version, and (package, requirement) pairs."""
    carried: Dict[str, Version] = {}
    needs = []
    for entry in sorted(os.listdir(folder)):
        path = osp.join(folder, entry)
        if entry.endswith('.whl'):
            text = wheel_metadata(path)
        elif entry.endswith('.tar.gz'):
            text = sdist_metadata(path)
        else:
            continue
        meta = email.parser.Parser().parsestr(text)
        name = canonicalize_name(meta['Name'])
        if name in carried:
            raise SystemExit(f'{name} is carried twice (in {folder}): keep '
                             'one version, pip installs none of two')
        carried[name] = Version(meta['Version'])
        for line in meta.get_all('Requires-Dist') or []:
            needs.append((name, Requirement(line)))
    return carried, needs


def unmet(carried: Dict[str, Version], needs, image: set,
          python_version: str = '3.12') -> List[str]:
    target = dict(TARGET, python_version=python_version,
                  python_full_version=f'{python_version}.0')
    problems = []
    for package, req in needs:
        if req.marker is not None and not req.marker.evaluate(target):
            continue
        name = canonicalize_name(req.name)
        if name in carried:
            if req.specifier and not req.specifier.contains(
                    carried[name], prereleases=True):
                problems.append(f'{package} needs {req}, but {name} '
                                f'{carried[name]} is carried')
        elif name not in image and PROVIDED_BY.get(name) not in image:
            problems.append(f'{package} needs {req}: neither carried nor in '
                            'the image')
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('folder')
    parser.add_argument('--python-version', default='3.12')
    args = parser.parse_args()
    carried, needs = read_folder(args.folder)
    if not carried:
        print(f'check_wheels: no wheels in {args.folder}', file=sys.stderr)
        return 1
    problems = unmet(carried, needs, image_packages(), args.python_version)
    print(f'{len(carried)} packages carried: ' + ', '.join(
        f'{n} {v}' for n, v in sorted(carried.items())))
    for problem in problems:
        print(f'MISSING: {problem}', file=sys.stderr)
    if not problems:
        print(f'every requirement of theirs is carried or in the image '
              f'({len(needs)} checked)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
