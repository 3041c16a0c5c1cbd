"""One ``shellbox serve --stdio`` child process and the requests in flight on it.

A factory starts one server; its machines and their commands share it. Requests are written
as JSON lines under a lock; a reader thread parses the answers and hands each to whoever
waits for it: an asyncio future on the loop that sent the request (so one server works from
any event loop and any thread), a queue for ``run_stream``, or a blocking waiter for the
constructors. The thread never runs user code.

When the last reference to the server goes away, or the interpreter exits, its stdin is
closed: the server then closes every machine it created (PROTOCOL.md, "Shutdown"). If this
process dies, the pipe closes all the same, so a killed client leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import weakref
from pathlib import Path
from typing import IO, Any, Callable

from .errors import ServerError, from_wire

#: How long closing a server waits for it to close its machines and exit.
SHUTDOWN_WAIT_SECONDS = 60.0
#: How long a cancelled request waits for the server to confirm it stopped the work.
CANCEL_WAIT_SECONDS = 30.0


def find_executable() -> str:
    """The ``shellbox`` binary: ``$SHELLBOX_BIN``, else the one installed beside this package
    (the wheel's scripts directory), else ``shellbox`` on ``PATH``."""
    explicit = os.environ.get("SHELLBOX_BIN")
    if explicit:
        return explicit
    name = "shellbox.exe" if sys.platform == "win32" else "shellbox"
    candidates = [Path(sysconfig.get_path("scripts")) / name, Path(sys.executable).parent / name]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise ServerError(
        "cannot find the shellbox executable: install the shellbox wheel, or set SHELLBOX_BIN"
    )


Deliver = Callable[[dict[str, Any]], None]


def _set_result(future: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(message)


def _set_exception(future: asyncio.Future[dict[str, Any]], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class Server:
    """A running ``shellbox serve --stdio``."""

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or find_executable()
        self._process = subprocess.Popen(
            [self.executable, "serve", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            # Its own session: a Ctrl-C meant for this program does not end the server (and
            # its machines) behind the program's back; the end of its stdin does.
            start_new_session=True,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._stdin: IO[bytes] = self._process.stdin
        self._write_lock = threading.Lock()
        self._ids = itertools.count(1)
        # id -> (deliver answer, deliver event or None); both run on the reader thread.
        self._pending: dict[int, tuple[Deliver, Deliver | None]] = {}
        self._pending_lock = threading.Lock()
        self._failure: ServerError | None = None
        # The reader holds no strong reference to this object, so a Server nobody uses any
        # more is collected and its finalizer ends the server process.
        reader = threading.Thread(
            target=_read,
            args=(self._process.stdout, self._process, self._pending, self._pending_lock, weakref.ref(self)),
            name="shellbox-serve-reader",
            daemon=True,
        )
        reader.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._process, self._stdin)

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._process.pid

    def close(self, wait: bool = True) -> None:
        """Ends the server: it closes every machine it created, then exits."""
        _shutdown(self._process, self._stdin, wait)
        self._finalizer.detach()

    # ---- sending ----

    def _register(self, answer: Deliver, event: Deliver | None = None) -> int:
        request_id = next(self._ids)
        with self._pending_lock:
            if self._failure is not None:
                raise self._failure
            self._pending[request_id] = (answer, event)
        return request_id

    def _write(self, request_id: int, method: str, params: dict[str, Any]) -> None:
        line = json.dumps(
            {"id": request_id, "method": method, "params": params},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        try:
            # Strict UTF-8: a lone surrogate (e.g. from os.fsdecode of a non-UTF-8 name)
            # is refused here, before anything is sent, instead of as an unanswerable line.
            data = line.encode("utf-8") + b"\n"
        except UnicodeEncodeError as error:
            with self._pending_lock:
                self._pending.pop(request_id, None)
            raise ValueError(
                f"{method}: a string holds a character that is not valid UTF-8 "
                f"(a lone surrogate at {error.start}); the protocol carries UTF-8 text only"
            ) from error
        try:
            with self._write_lock:
                self._stdin.write(data)
                self._stdin.flush()
        except (OSError, ValueError) as error:
            with self._pending_lock:
                self._pending.pop(request_id, None)
            raise ServerError(f"shellbox serve is gone: {error}") from error

    def cancel(self, request_id: int) -> None:
        """Asks the server to cancel a request in flight (its answer says `cancelled`)."""
        try:
            cancel_id = self._register(lambda _message: None)
            self._write(cancel_id, "cancel", {"id": request_id})
        except ServerError:
            pass

    # ---- calls ----

    def call_sync(self, method: str, params: dict[str, Any]) -> Any:
        """Sends a request and blocks until its answer; raises its error."""
        done = threading.Event()
        box: list[dict[str, Any]] = []

        def answer(message: dict[str, Any]) -> None:
            box.append(message)
            done.set()

        request_id = self._register(answer)
        self._write(request_id, method, params)
        done.wait()
        return _result(box[0])

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """Sends a request and awaits its answer; raises its error. Cancelling the awaiting
        task cancels the request on the server (its command is killed) before re-raising."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        holder = [future]

        def answer(message: dict[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(_set_result, holder[0], message)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more

        request_id = self._register(answer)
        self._write(request_id, method, params)
        try:
            message = await future
        except asyncio.CancelledError:
            if not future.done() or future.cancelled():
                confirmed: asyncio.Future[dict[str, Any]] = loop.create_future()
                holder[0] = confirmed
                self.cancel(request_id)
                try:
                    await asyncio.wait_for(asyncio.shield(confirmed), CANCEL_WAIT_SECONDS)
                except BaseException:  # noqa: BLE001 - the cancellation is what we report
                    pass
            raise
        return _result(message)

    def stream(self, method: str, params: dict[str, Any]) -> tuple[int, asyncio.Queue[dict[str, Any]]]:
        """Sends a request whose events and final answer all arrive on the returned queue."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def deliver(message: dict[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, message)
            except RuntimeError:
                pass

        request_id = self._register(deliver, deliver)
        self._write(request_id, method, params)
        return request_id, queue

def _read(
    stdout: IO[bytes],
    process: subprocess.Popen[bytes],
    pending: dict[int, tuple[Deliver, Deliver | None]],
    lock: threading.Lock,
    server: weakref.ReferenceType[Server],
) -> None:
    """The reader thread: delivers each answer and event to its request."""
    for line in stdout:
        try:
            message = json.loads(line)
            request_id = message.get("id")
        except (ValueError, AttributeError):
            continue
        if "event" in message:
            with lock:
                entry = pending.get(request_id)
            if entry is not None and entry[1] is not None:
                entry[1](message)
            continue
        with lock:
            entry = pending.pop(request_id, None)
        if entry is not None:
            entry[0](message)
    # End of output: the server exited. Fail everything still waiting.
    status = process.wait()
    failure = ServerError(f"shellbox serve exited (status {status}) with requests in flight")
    with lock:
        alive = server()
        if alive is not None:
            alive._failure = failure
        entries = list(pending.values())
        pending.clear()
    for answer, _ in entries:
        answer({"error": {"kind": "server", "message": str(failure), "details": {}}})


def _result(message: dict[str, Any]) -> Any:
    error = message.get("error")
    if error is not None:
        if error.get("kind") == "cancelled":
            raise asyncio.CancelledError()
        raise from_wire(error)
    return message.get("result")


def _shutdown(process: subprocess.Popen[bytes], stdin: IO[bytes], wait: bool = True) -> None:
    try:
        stdin.close()
    except OSError:
        pass
    if wait:
        try:
            process.wait(timeout=SHUTDOWN_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
