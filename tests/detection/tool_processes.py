"""Tool processes forked from an interpreter that has imported the stack.

A fresh ``python tools/train.py`` spends about 6 CPU-seconds importing
torch, mmengine, mmcv, mmdet, mmseg and mmpretrain before its own code runs,
and the suite starts about 40 tool processes on two cores. So each pytest
worker starts one server (this file run as a script), which imports those
third-party packages once and forks a child per tool run. The child is the
tool: it runs the script as ``__main__`` with its own arguments, working
directory and environment, writes its output to a file and exits with the
tool's status. It can be killed like any process.

What a child shares with a fresh interpreter, and what it does not:

- The server does not import ``mmlaplacian``: every tool imports it itself
  (or its config's ``custom_imports`` does), as a user's process does, so
  the registration, the checkpoint-loading fix and the adapters' import
  hooks run in each tool.
- The server has read the environment variables that take effect at
  start-up (Python's, glibc's allocator, OpenMP, BLAS, torch, matplotlib):
  a run whose start-up variables differ from the server's gets a fresh
  interpreter (:data:`STARTUP_VARIABLES`).
- numpy's and torch's global generators are seeded from the system, as in
  a fresh interpreter (Python's ``random`` reseeds itself on fork).
- The children share the server's string-hash seed.

Tests that check a fresh interpreter itself (the distributed launches, the
``-c`` scripts) start one with :mod:`subprocess`.
"""
from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import os.path as osp
import resource
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Dict, List, Optional, Union

# What every tool of the suite imports before its first line runs (measured
# with ``tools/train.py --help``) and during its run: the packages only, in
# import order. mmlaplacian is left out on purpose (see above).
PRELOAD = (
    'torch', 'numpy', 'cv2', 'matplotlib.pyplot', 'pycocotools.coco',
    'mmengine.runner', 'mmcv.ops', 'mmcv.transforms', 'mmdet.apis',
    'mmdet.datasets', 'mmdet.engine', 'mmdet.evaluation', 'mmdet.models',
    'mmdet.visualization', 'mmseg.apis', 'mmseg.datasets', 'mmseg.engine',
    'mmseg.evaluation', 'mmseg.models', 'mmseg.visualization',
    'mmpretrain.apis')
# Variables read when the interpreter or a preloaded library starts (names
# or prefixes): a run must match the server's to be forked from it.
STARTUP_VARIABLES = ('PYTHON', 'LD_', 'MALLOC_', 'OMP_', 'GOMP_', 'KMP_',
                     'MKL_', 'OPENBLAS_', 'TORCH', 'PYTORCH_', 'CUDA_',
                     'MPL', 'OPENCV_', 'HOME', 'XDG_', 'TMPDIR', 'LANG',
                     'LC_')


def _startup(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARIABLES)}


class ForkedProcess:
    """A tool run forked by the server: the part of ``subprocess.Popen``
    the tests use (``pid``, ``returncode``, ``poll``, ``wait``, ``kill``).
    """

    def __init__(self, server: 'ToolServer', run_id: int, pid: int) -> None:
        self._server = server
        self._id = run_id
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self._server.returncode(self._id, timeout=0)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.returncode(self._id, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, as ``Popen.kill``; nothing once the server reaped it."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended this instant; wait() gets its status


class ToolServer:
    """The worker's side of one server: starts runs, collects their ends."""

    def __init__(self, env: Dict[str, str]) -> None:
        self.startup_env = _startup(env)
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, osp.abspath(__file__)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._changed = threading.Condition()
        self._pids: Dict[int, int] = {}
        self._codes: Dict[int, int] = {}
        self._next_id = 0
        threading.Thread(target=self._read_replies, daemon=True).start()

    def _read_replies(self) -> None:
        for line in self._proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                self._proc.kill()  # the waits below then raise with its log
                break
            with self._changed:
                if 'pid' in reply:
                    self._pids[reply['id']] = reply['pid']
                else:
                    self._codes[reply['id']] = reply['returncode']
                self._changed.notify_all()
        with self._changed:  # the server is gone
            self._changed.notify_all()

    def _wait_for(self, table: Dict[int, int], run_id: int,
                  timeout: Optional[float]) -> Optional[int]:
        with self._changed:
            self._changed.wait_for(
                lambda: run_id in table or self._proc.poll() is not None,
                timeout)
            if run_id in table:
                return table[run_id]
        if self._proc.poll() is not None:
            self._log.seek(0)
            raise RuntimeError(
                f'the tool server exited {self._proc.returncode}:\n'
                f'{self._log.read().decode(errors="replace")[-6000:]}')
        return None

    def start(self, argv: List[str], cwd: str, env: Dict[str, str],
              output: str, file_size_limit: Optional[int]) -> ForkedProcess:
        with self._changed:
            run_id = self._next_id
            self._next_id += 1
        request = dict(id=run_id, argv=argv, cwd=cwd, env=env, output=output,
                       file_size_limit=file_size_limit)
        self._proc.stdin.write(json.dumps(request).encode() + b'\n')
        self._proc.stdin.flush()
        # The first run waits here for the server's imports (~10 s).
        pid = self._wait_for(self._pids, run_id, timeout=300)
        if pid is None:
            raise RuntimeError('the tool server did not start a run in 300 s')
        return ForkedProcess(self, run_id, pid)

    def returncode(self, run_id: int,
                   timeout: Optional[float]) -> Optional[int]:
        """The run's status, or None if it still runs after ``timeout``
        seconds (None: until it ends)."""
        return self._wait_for(self._codes, run_id, timeout)

    def close(self) -> None:
        """End of the worker: the server kills what still runs, and exits."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=60)


_server: Optional[ToolServer] = None


def start_python_tool(argv: List[str], cwd: str, env: Dict[str, str],
                      output: str, file_size_limit: Optional[int] = None
                      ) -> Union[ForkedProcess, subprocess.Popen]:
    """``python argv[0] argv[1:]`` with stdout and stderr in ``output``.

    Forked from the worker's server when ``env``'s start-up variables match
    the server's, else a fresh interpreter.

    Args:
        argv: The script's path and its arguments.
        cwd: The working directory of the tool.
        env: Its whole environment.
        output: The file that receives stdout and stderr (truncated first).
        file_size_limit: ``RLIMIT_FSIZE`` in bytes for the tool, if any.
    """
    global _server
    open(output, 'w').close()
    if _server is None:
        _server = ToolServer(env)
        atexit.register(_server.close)
    if _startup(env) == _server.startup_env:
        return _server.start(list(argv), cwd, env, output, file_size_limit)

    with open(output, 'a') as out:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=cwd, env=env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=functools.partial(_limit_file_size, file_size_limit)
            if file_size_limit else None)


def _limit_file_size(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


# The server (this file run as a script).


def _exit_code(exit: SystemExit) -> int:
    """The status a fresh interpreter exits with for ``exit``."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def _script_frames(error: BaseException, script: str):
    """The traceback from the script's first frame on, as a fresh
    interpreter prints it (without this file's and runpy's frames)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    return tb or error.__traceback__


def _run_tool(request: dict, server_fds: List[int]) -> None:
    """In the forked child: become ``python argv...``, never return."""
    import numpy
    import torch
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in server_fds:
        os.close(fd)
    out = os.open(request['output'], os.O_WRONLY | os.O_APPEND)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # was the request pipe
    os.dup2(out, 1)  # was the server's log
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    if request['file_size_limit']:
        _limit_file_size(request['file_size_limit'])
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    argv = request['argv']
    sys.argv = list(argv)
    sys.path[0] = osp.dirname(osp.abspath(argv[0]))
    # Seeded from the system, as in a fresh interpreter (the server's state
    # would be every child's).
    numpy.random.seed()
    torch.seed()
    code = 0
    try:
        runpy.run_path(argv[0], run_name='__main__')
    except SystemExit as exit:
        code = _exit_code(exit)
    except BaseException as error:  # as a fresh interpreter: status 1
        frames = _script_frames(error, argv[0])
        sys.excepthook(type(error), error.with_traceback(frames), frames)
        code = 1
    # The interpreter's own shutdown: non-daemon threads, exit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream, as at interpreter exit
            pass
    os._exit(code)


def _reply(replies: int, message: dict) -> None:
    os.write(replies, json.dumps(message).encode() + b'\n')


def serve() -> None:
    # The replies get their own descriptor; what the imports print goes to
    # the log, and leaves nothing in sys.stdout's buffer for the children.
    replies = os.dup(1)
    os.dup2(2, 1)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:  # not in this stack: the tool says so
            pass
    sys.stdout.flush()
    wakeup = list(os.pipe())
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runs: Dict[int, int] = {}  # pid: run id
    pending = b''
    while True:
        ready, _, _ = select.select([0, wakeup[0]], [], [])
        if wakeup[0] in ready:
            os.read(wakeup[0], 4096)
        while runs:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _reply(replies, dict(id=runs.pop(pid),
                        returncode=os.waitstatus_to_exitcode(status)))
        if 0 not in ready:
            continue
        data = os.read(0, 1 << 20)
        if not data:  # the worker is gone: so are its runs
            for pid in runs:
                os.kill(pid, signal.SIGKILL)
            return
        pending += data
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                try:
                    _run_tool(request, [*wakeup, replies])
                finally:  # a failed set-up must not return to this loop
                    os._exit(1)
            runs[pid] = request['id']
            _reply(replies, dict(id=request['id'], pid=pid))


if __name__ == '__main__':
    serve()
