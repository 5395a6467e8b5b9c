"""``TrackerProcess``: an ``MlflowTracker`` in a helper process, so that setting up tracking never
holds up training.

Importing MLflow (~1.2 s of CPU here), opening or creating the SQLite store (~0.6 s, ~1.3 s with
its migrations) and every write are Python work that would run on the training thread. A fresh
process, such as ``initmem run``, starts the helper before it builds data and model; the helper
does all of that on another core meanwhile, and the training process never imports MLflow.

The helper is the same ``MlflowTracker`` (batched writes, retries, the unsynced file), driven
over a pipe, one JSON object per line, in order. Calls that must answer (``start_run``,
``resume_run``, ``log_artifact``, ``end_run``) wait for the reply, so a bad store still fails in
one line before training, a run has its id before its first checkpoint, and a run is not over
until the store has its end. The other calls do not wait.

Nothing is lost when either process dies:

- the training process dies (SIGKILL included): the helper reads the end of its input, writes
  what it holds (the unsynced file keeps what the store refuses) and exits; the run stays
  RUNNING, as any killed run, and ``--resume`` continues it;
- the helper dies: the helper says which writes the store has taken (``ack``); the training
  process keeps the others, and every write from then on, and leaves them in the unsynced file
  when the run ends (``initmem sync`` uploads them; uploading twice adds nothing).

The helper starts in a session of its own, so a Ctrl-C or a hang-up for the terminal reaches
only the training process, which then ends the run through the helper. A command stopped before
its run exists ends its helpers at once (``end_helpers_without_a_run``): nothing is created after
the command has exited (a store being created is only renamed into place once complete).
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError, InitmemError, RunWarning
from initmem_core.tracking.client import error_line
from initmem_core.tracking.pending import PendingWrites, keep_copy, keep_for_sync, unsynced_folder
from initmem_core.tracking.provenance import command_source
from initmem_core.tracking.sqlite_store import discard_store_being_created
from initmem_core.tracking.tracker import FLUSH_EVERY_S, ForwardedCalls, MlflowTracker
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri, store_folder
from initmem_core.vocabulary import FINISHED, KILLED, STOPPED_BY_TAG

#: Calls whose caller waits for the helper's answer.
ANSWERED = frozenset({"start_run", "resume_run", "log_artifact", "end_run"})
_EXITED = object()  # what the reader thread queues when the helper's output ends
_STARTED: weakref.WeakSet[TrackerProcess] = weakref.WeakSet()  # this process's helpers


class OpeningAbandoned(KeyboardInterrupt):
    """A signal (``signum``) came before the helper began to open the run: nothing was tracked."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class TrackerProcess(ForwardedCalls):
    """The ``Tracker`` protocol, served by an ``MlflowTracker`` in a helper process started at
    construction (the data-only calls come from ``ForwardedCalls``). ``close()`` ends the helper
    (call it if the run is never ended)."""

    uri: str

    def __init__(
        self,
        uri: str | None = None,
        experiment: str = DEFAULT_EXPERIMENT,
        parent_run_id: str | None = None,
        flush_every_s: float = FLUSH_EVERY_S,
        system_metrics: bool = False,
    ):
        self.uri = resolve_tracking_uri(uri)
        self.run_id: str | None = None
        self._sent = 0
        self._unacknowledged: dict[int, tuple[str, tuple, int]] = {}  # seq -> call, args, time ms
        self._orphaned: PendingWrites | None = None  # once the helper is gone: what waits for `initmem sync`
        self._not_kept: list[str] = []  # once the helper is gone: what the unsynced folder refused too
        self._began: set[int] = set()  # start_run/resume_run requests the helper has begun to apply
        self._events: queue.Queue = queue.Queue()
        self._stderr = tempfile.TemporaryFile()
        package_root = str(Path(__file__).resolve().parents[2])  # importable even from a source tree
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        settings = json.dumps(
            {
                "uri": self.uri,
                "experiment": experiment,
                "parent_run_id": parent_run_id,
                "flush_every_s": flush_every_s,
                # MLflow's source tags say what the user started, where: this process's, not the helper's
                "source_name": command_source(),
                "source_folder": os.getcwd(),
                "system_metrics": system_metrics,
            }
        )
        self._process = subprocess.Popen(
            [sys.executable, "-m", "initmem_core.tracking.tracker_process", settings],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._read, name="initmem-tracker-replies", daemon=True).start()
        _STARTED.add(self)

    # -- the Tracker protocol ----------------------------------------------------------------

    def start_run(self, name, params, tags):
        self.run_id = self._forward("start_run", name, {k: str(v) for k, v in params.items()}, dict(tags))
        return self.run_id

    def resume_run(self, run_id):
        self._forward("resume_run", run_id)
        self.run_id = run_id

    def log_artifact(self, local_path, artifact_path=None):
        self._forward("log_artifact", str(local_path), artifact_path)

    def end_run(self, status=FINISHED):
        left = self._forward("end_run", status) or {}
        self.unsynced = left.get("unsynced") or self.unsynced
        self.lost = self.lost or bool(left.get("lost"))
        self.close()

    def close(self) -> None:
        """Let the helper finish (it writes what it holds, then exits); idempotent."""
        if self._process.stdin and not self._process.stdin.closed:
            try:
                self._process.stdin.close()
            except OSError:
                pass
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a store that hangs: what it holds is the helper's to keep
            pass

    def end_now(self, timeout: float = 1.0) -> None:
        """End the helper now and wait for it (its run was never started: it holds nothing to keep)."""
        try:
            self._process.terminate()  # it deletes a store it was creating, then exits
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=timeout)
        except OSError:
            pass

    # -- the pipe ----------------------------------------------------------------------------

    def _forward(self, call: str, *args: Any) -> Any:
        if self._orphaned is not None:
            return self._keep(call, args, int(time.time() * 1000))
        self._sent += 1
        seq = self._sent
        if call not in ("start_run", "resume_run", "log_dataset"):  # writes the store must end up with
            self._unacknowledged[seq] = (call, args, int(time.time() * 1000))
        try:
            assert self._process.stdin is not None
            self._process.stdin.write((json.dumps({"seq": seq, "call": call, "args": args}) + "\n").encode())
            self._process.stdin.flush()
        except (OSError, ValueError):  # the helper is gone (a broken pipe)
            return self._helper_gone(seq, call, args)
        if call not in ANSWERED:
            self._handle_events(block=False)
            return None
        if call in ("start_run", "resume_run"):
            return self._open_or_give_up(seq, call, args)
        reply = self._handle_events(block=True, seq=seq)
        return self._answer(seq, call, args, reply)

    def _open_or_give_up(self, seq: int, call: str, args: tuple) -> Any:
        """Wait for the run to be opened, unless ``give_up_opening`` names a signal before the
        helper has begun to open it (it may still be importing MLflow or creating the store, for
        seconds): then the helper is ended at once and ``OpeningAbandoned`` raised, with nothing
        tracked. Once begun, opening is quick and is waited for (the run is then ended as KILLED)."""
        while True:
            reply = self._handle_events(block=True, seq=seq, poll_s=0.1)
            if reply is not None:
                return self._answer(seq, call, args, reply)
            signum = self.give_up_opening()
            if signum is not None and seq not in self._began:
                self.end_now()
                raise OpeningAbandoned(signum)

    def _answer(self, seq: int, call: str, args: tuple, reply: Any) -> Any:
        if reply is _EXITED:
            return self._helper_gone(seq, call, args)
        if "error" in reply:
            self._unacknowledged.pop(seq, None)
            raise (ConfigError if reply.get("kind") == "ConfigError" else InitmemError)(reply["error"])
        if call == "log_artifact":  # uploaded; or a copy waits in the unsynced folder, where the helper put it
            self._unacknowledged.pop(seq, None)
            if reply["value"]:
                self._unacknowledged[seq] = ("kept_artifact", (reply["value"], args[1]), 0)
        return reply.get("value")

    def _read(self) -> None:
        """The reader thread: every line the helper writes goes to the queue, then _EXITED."""
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                self._events.put(json.loads(line))
            except ValueError:
                continue
        self._events.put(_EXITED)

    def _handle_events(self, block: bool, seq: int | None = None, poll_s: float | None = None) -> Any:
        """Apply acknowledgements and warnings; returns the reply to ``seq`` (or _EXITED) if it came.
        ``poll_s``: give up waiting after that long without an event (returns ``None``)."""
        while True:
            try:
                event = self._events.get(timeout=poll_s or 0.5) if block else self._events.get_nowait()
            except queue.Empty:
                if block and poll_s is None:
                    continue
                return None
            if event is _EXITED:
                self._events.put(_EXITED)  # stays visible to later calls
                return _EXITED if block else None
            if "ack" in event:
                for done in [s for s in self._unacknowledged if s <= event["ack"]]:
                    del self._unacknowledged[done]
            elif "warning" in event:
                warnings.warn(event["warning"], RunWarning, stacklevel=4)
            elif "began" in event:
                self._began.add(event["began"])
            elif "reply" in event and event["reply"] == seq:
                return event

    def _helper_gone(self, seq: int, call: str, args: tuple) -> Any:
        """Keep every write the store has not acknowledged, from now on in this process."""
        self._unacknowledged.pop(seq, None)  # kept below, as the call it is
        code = self._process.wait()
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        reason = f"exit code {code}" + (f": {lines[-1][:200]}" if lines else "")
        if self.run_id is None:
            raise ConfigError(
                f"tracking store {self.uri} could not be opened: the tracking helper process ended "
                f"({reason}); check --tracking-uri"
            )
        self._orphaned = PendingWrites()
        for kept_call, kept_args, when in (self._unacknowledged[s] for s in sorted(self._unacknowledged)):
            self._keep(kept_call, kept_args, when)
        self._unacknowledged.clear()
        warnings.warn(
            f"the tracking helper process of run {self.run_id} ended ({reason}); the run keeps training "
            f"and its writes wait in {unsynced_folder(store_folder(self.uri))}: run "
            f"`initmem sync --tracking-uri {self.uri}` once it ends",
            RunWarning,
            stacklevel=4,
        )
        return self._keep(call, args, int(time.time() * 1000))

    def _keep(self, call: str, args: tuple, when: int) -> Any:
        """Record one write for the unsynced file (the helper is gone)."""
        pending = self._orphaned
        assert pending is not None
        folder = unsynced_folder(store_folder(self.uri))
        if call == "log_metrics":
            metrics, step = args
            pending.metrics.extend((key, float(value), when, step) for key, value in metrics.items())
        elif call == "set_tags":
            pending.tags.update(args[0])
        elif call == "log_text":
            pending.texts[args[1]] = args[0]
        elif call == "log_artifact":
            try:
                pending.files.append((keep_copy(folder, self.run_id or "", args[0]), args[1]))
            except OSError as error:
                self._not_kept.append(f"{Path(args[0]).name} ({error.strerror or error})")
        elif call == "kept_artifact":
            pending.files.append(args)
        elif call == "end_run":
            pending.status = None if self._not_kept else (args[0], when)  # as MlflowTracker.end_run
            self._orphaned = PendingWrites()
            run_id, waits = self.run_id or "", "once the store answers"
            unsynced, _ = keep_for_sync(pending, folder, run_id, self.uri, self._not_kept, waits)
            return {"unsynced": unsynced, "lost": bool(self._not_kept)}
        return None  # log_dataset: once per run and not kept, as MlflowTracker does


def end_helpers_without_a_run() -> None:
    """Kill this process's helpers whose run was never started, for a command that exits at once
    on a signal (safe inside a signal handler: no lock is taken). Helpers of a started run are
    left to write what they hold."""
    try:
        helpers = list(_STARTED)
    except RuntimeError:  # one was being added as the signal came: it is the one to end
        helpers = list(_STARTED)
    for helper in helpers:
        if helper.run_id is None:
            helper.end_now()


# -- the helper's side -------------------------------------------------------------------------


def serve(settings: dict[str, Any], requests: int, replies: Any) -> None:
    """Serve one run's tracker calls read from file descriptor ``requests`` until the run ends or
    the input does. Between requests the tracker's own batching schedule is kept: what waits is
    written once its interval is up, even if no call comes."""

    def send(message: dict) -> None:
        try:
            replies.write(json.dumps(message) + "\n")
            replies.flush()
        except OSError:  # the training process is gone: the end of the input says so next
            pass

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RunWarning):
            send({"warning": " ".join(str(message).split())})

    warnings.showwarning = show
    try:
        tracker: MlflowTracker | None = MlflowTracker(**settings)  # TrackerProcess names its arguments
        opening_error = ""
        _warm_up(tracker)
    except Exception as error:  # answered to the first call that waits: start_run or resume_run
        tracker, opening_error = None, error_line(error)
    buffered, last_seq = b"", 0
    while True:
        if b"\n" not in buffered:
            timeout = None if tracker is None or not tracker.pending else tracker.flush_every_s
            if not select.select([requests], [], [], timeout)[0]:
                tracker.flush()  # type: ignore[union-attr]
                if not tracker.pending:  # type: ignore[union-attr]
                    send({"ack": last_seq})
                continue
            chunk = os.read(requests, 1 << 16)
            if not chunk:  # the training process is gone, or closed us before its run began
                if tracker is not None and tracker.run_id:
                    tracker.stop_monitor()
                    tracker.write_or_keep()
                return
            buffered += chunk
            continue
        line, buffered = buffered.split(b"\n", 1)
        request = json.loads(line)
        seq, call, args = request["seq"], request["call"], request["args"]
        last_seq = seq
        if tracker is None:
            if call in ANSWERED:
                send({"reply": seq, "error": opening_error, "kind": "ConfigError"})
            continue
        opening = call in ("start_run", "resume_run")
        if opening:  # from here on the training process waits for the run rather than end us
            tracker.wait_until_writable()  # a locked store: until now a signal ends us with nothing written
            _OPENING["now"] = True
            send({"began": seq})
        try:
            value = _apply(tracker, call, args)
        except Exception as error:
            send({"reply": seq, "error": error_line(error), "kind": type(error).__name__})
            continue
        finally:
            _OPENING["now"] = False
        if opening and _OPENING["ended_by"]:  # SIGTERM came while the run was being opened
            _end_opened_run(tracker, _OPENING["ended_by"])
        if call in ANSWERED:
            send({"reply": seq, "value": value})
        if not tracker.pending:
            send({"ack": seq})
        if call == "end_run":
            return


def _warm_up(tracker: Any) -> None:
    """Pay now, while the training process is still building, for what would otherwise land in
    ``start_run``, which it waits for: MLflow's first load of an experiment, and the first full
    garbage collection over everything MLflow's import created (~0.2 s here), after which those
    objects are frozen out of every later collection."""
    import gc

    try:
        tracker.client.get_experiment(tracker.experiment_id)
    except Exception:  # only a head start: start_run meets (and reports) any real problem
        pass
    gc.collect()
    gc.freeze()


def _apply(tracker: Any, call: str, args: list) -> Any:
    if call == "start_run":
        return tracker.start_run(*args)
    if call == "end_run":
        tracker.end_run(*args)
        return {"unsynced": tracker.unsynced, "lost": tracker.lost}
    if call == "log_artifact":
        kept = len(tracker.pending.files)
        tracker.log_artifact(*args)
        return tracker.pending.files[-1][0] if len(tracker.pending.files) > kept else ""
    getattr(tracker, call)(*args)
    return None


_OPENING: dict[str, Any] = {"now": False, "ended_by": None}  # the helper's state, for its SIGTERM handler


def _end_at_once(signum: int, frame: Any) -> None:
    """SIGTERM, from a training process that exits before its run began (or from anyone): what
    is written is written; a store half-created is deleted. The training process keeps every
    write this helper had not acknowledged. While a run is being opened, it is opened, then
    ended KILLED (``_end_opened_run``), so that no run stays RUNNING with nobody to end it."""
    if _OPENING["now"]:
        _OPENING["ended_by"] = signum
        return

    discard_store_being_created()
    os._exit(128 + signum)


def _end_opened_run(tracker: Any, signum: int) -> None:
    try:
        if tracker.run_id:
            tracker.set_tags({STOPPED_BY_TAG: signal.Signals(signum).name})
            tracker.end_run(KILLED)
    finally:
        os._exit(128 + signum)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the training process decides when the run ends
    signal.signal(signal.SIGTERM, _end_at_once)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to the stderr file, never into the replies
    sys.stdout = sys.stderr
    serve(json.loads(sys.argv[1]), sys.stdin.fileno(), replies)
    replies.close()
    os._exit(0)  # every write is committed; MLflow's exit hooks would only make the run wait


if __name__ == "__main__":
    main()
