"""`smbwire analyze --dask [ADDRESS]`: the analysis on a Dask cluster.

Each shard (a share of the connections, the sharding `--threads` uses) is one Dask task that
calls the engine's `analyze_shard`: it reads every input file in the same time-merged order,
decodes and hashes only its connections' frames and writes a ledger part (Parquet) to a run
directory under the work directory. The client then runs the ordered stage once over all parts
(`merge_parts`) and gets the result one process gives (docs/architecture.md, "Distributed").

Without ADDRESS a `distributed.LocalCluster` runs on this machine (one worker process per CPU,
one thread each); with one, the client connects to that scheduler. The workers must run the
same smbwire (and engine) as the client, and read the inputs and write the work directory at
the same absolute paths as this machine.

Only `--dask` imports this module, and it imports `distributed` only when a run starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from . import engine
from .errors import InputError, SmbwireError, UserError
from .engine import check_writable

if TYPE_CHECKING:
    from .topology import Topology

#: Seconds to wait for the scheduler to answer, and for a first worker to join it.
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Seconds between two progress messages of one task (the engine calls back every few MiB).
PROGRESS_INTERVAL = 0.25
#: Seconds between two looks of a task at the run's cancel flag.
CANCEL_CHECK_INTERVAL = 1.0

#: `progress(state)`: called from the client's thread about 5 times a second while the tasks
#: run, and once when the merge starts. `state` is a dict:
#: `stage` ("decode" or "merge"), `shards`, `shards_done`, `read_bytes` (summed over the
#: tasks; every task reads every input), `total_bytes` (input bytes x shards), `workers`
#: ({address: bytes read by its tasks}), `input_bytes`.
DaskProgressFn = Callable[[dict[str, Any]], None]

_ADDRESS = re.compile(r"^([a-z][a-z0-9+.-]*://\S+|[^\s/:]+:\d{1,5})$")


def check_address(address: str) -> str:
    """ADDRESS as given to `--dask`: `local`, `SCHEME://HOST:PORT` or `HOST:PORT`."""
    if address == "local" or _ADDRESS.match(address):
        return address
    hint = " (it names a file: put --dask after the capture files, or write --dask=local)" if os.path.exists(address) else ""
    raise UserError(f"--dask {address}: not a scheduler address (tcp://HOST:PORT, HOST:PORT or 'local'){hint}")


def analyze_dask(
    paths: Sequence[str | os.PathLike[str]],
    *,
    address: str | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    shards: int | None = None,
    progress: DaskProgressFn | None = None,
    on_dashboard: Callable[[str], None] | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    topology: Topology | Mapping[str, Any] | None = None,
    window: float = engine.DEFAULT_WINDOW_SECONDS,
    evidence: str | os.PathLike[str] | None = None,
    top_n: int = engine.DEFAULT_TOP_N,
    ledger: str | os.PathLike[str] | None = None,
    from_ns: int | None = None,
    to_ns: int | None = None,
    reorder_buffer: int | None = None,
    assume_members: bool = False,
    interval: float | None = None,
    max_index_memory: int | None = None,
    keys: str | os.PathLike[str] | None = None,
    max_memory: int | None = None,
) -> dict[str, Any]:
    """Analyse capture files on a Dask cluster; returns the result dict `engine.analyze` gives
    for the same files and options (docs/json-schema.md), with `analysis.threads` the shard
    count and `analysis.dask` describing the run.

    `address`: a scheduler (`tcp://host:8786`); None or "local": a LocalCluster here.
    `work_dir`: where the tasks write their ledger parts (a run directory inside it, removed
    afterwards); required with a scheduler address, a temporary directory otherwise.
    `shards`: tasks (default: the cluster's worker threads). `on_dashboard(link)`: called once
    with the dashboard address, when the cluster has one.

    Raises `UserError` (one line) for what the user can fix: an option it cannot honour, an
    unreachable scheduler, a work directory or file a worker cannot use."""
    t_start = time.perf_counter()
    if address == "local":
        address = None
    if keys is not None:
        raise UserError("--keys cannot run with --dask: session keys derive from a session's first channel, "
                        "which another shard may hold; analyse encrypted captures without --dask")
    given = engine.check_inputs(paths)
    for p in given:
        if p == "-":
            raise UserError("--dask needs capture files every worker can read; standard input cannot be shared")
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue  # missing or unreadable: skipped by the engine as one process skips it
        if not stat.S_ISREG(mode):
            raise UserError(f"--dask needs capture files every worker can read; {p} is a stream")
    files = [os.path.abspath(p) for p in given]
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 4096):
        raise UserError(f"shards must be an integer from 1 to 4096, got {shards!r}")
    ledger_path = None
    if ledger is not None:
        ledger_path = os.fspath(ledger)
        check_writable(ledger_path)
    evidence_path = None
    if evidence is not None:
        evidence_path = os.fspath(evidence)
        check_writable(evidence_path)
    config = engine.build_config(topology=topology, window=window, top_n=top_n, ledger=ledger_path,
                                 from_ns=from_ns, to_ns=to_ns, reorder_buffer=reorder_buffer, interval=interval,
                                 assume_members=assume_members, max_index_memory=max_index_memory,
                                 max_memory=max_memory)
    if address is not None and work_dir is None:
        raise UserError(f"--dask {address} needs --work-dir: a directory every worker and this machine reach "
                        "at the same path (the tasks write their ledger parts there)")
    if work_dir is not None:
        work_dir = os.path.abspath(os.fspath(work_dir))
        if not os.path.isdir(work_dir):
            raise UserError(f"--work-dir {work_dir}: not a directory")
        if not os.access(work_dir, os.W_OK | os.X_OK):
            raise UserError(f"--work-dir {work_dir}: not writable")
    distributed = _import_distributed()
    core = engine.load_core()
    for fn in ("analyze_shard", "merge_parts"):
        if not hasattr(core, fn):
            raise SmbwireError(f"the engine has no {fn} (rebuild it: maturin develop -r)")

    run_id = uuid.uuid4().hex[:12]
    try:
        run_dir = tempfile.mkdtemp(prefix=f"smbwire-dask-{run_id}-", dir=work_dir)
    except OSError as e:
        # /proc, a full disk, a read-only mount that access() called writable (as root).
        where = work_dir if work_dir is not None else "the temporary directory"
        raise UserError(f"--work-dir {where}: cannot make the run directory there: {e.strerror or e}") from None
    cluster = client = None
    try:
        cluster, client = _connect(distributed, address, connect_timeout)
        nthreads = client.nthreads()
        workers = len(nthreads)
        n = shards if shards is not None else max(1, sum(nthreads.values()))
        if on_dashboard is not None:
            link = _dashboard_link(client)
            if link:
                on_dashboard(link)
        parts = [os.path.join(run_dir, f"part-{k:04d}-of-{n:04d}.parquet") for k in range(n)]
        t_tasks = time.perf_counter()
        done = _run_tasks(distributed, client, files, json.dumps(config), parts, run_id, progress)
        tasks_seconds = time.perf_counter() - t_tasks
        scheduler = str(client.scheduler.address) if client.scheduler is not None else (address or "")
        _close(client, cluster)
        client = cluster = None

        mine = _engine(core)
        for d in done:
            if d.get("engine") != mine:
                raise UserError(f"worker {d['worker']} runs engine {d.get('engine')}, this machine {mine}: "
                                "install the same smbwire on every worker")
        for part in parts:
            if not os.path.exists(part):
                raise UserError(f"{part}: not found here, though a worker wrote it: --work-dir must be one "
                                "directory every worker and this machine share (the same path on each)")
        if progress is not None:
            progress(_state("merge", n, n, done, sum(d["stats"].get("input_bytes", 0) for d in done) // max(1, n)))
        part_bytes = sum(os.path.getsize(p) for p in parts)
        t_merge = time.perf_counter()
        try:
            text = core.merge_parts(parts, json.dumps(config), evidence_path)
        except (ValueError, OSError) as e:
            raise InputError(engine._one_line(e)) from None
        merge_seconds = time.perf_counter() - t_merge
    finally:
        if client is not None or cluster is not None:
            _close(client, cluster)
        shutil.rmtree(run_dir, ignore_errors=True)

    result = engine._parse_result(text)
    _restore_given_paths(result, dict(zip(files, given)))
    elapsed = time.perf_counter() - t_start
    analysis = result.setdefault("analysis", {})
    input_bytes = (result.get("accounting") or {}).get("input_bytes") or 0
    analysis["elapsed_seconds"] = elapsed
    analysis["bytes_per_second"] = input_bytes / elapsed if elapsed > 0 else 0.0
    analysis["threads"] = n
    analysis["dask"] = {
        "scheduler": scheduler if address is not None else "local",
        "workers": workers,
        "shards": n,
        "tasks_seconds": tasks_seconds,
        "task_seconds": [d["seconds"] for d in sorted(done, key=lambda d: d["stats"].get("shard", 0))],
        "merge_seconds": merge_seconds,
        "part_bytes": part_bytes,
        "part_rows": sum(int(d["stats"].get("rows", 0)) for d in done),
    }
    return result


# --- the task (runs on a worker) -------------------------------------------------------------


def run_shard(files: list[str], config_json: str, shard: int, shards: int, part_path: str, run_id: str) -> dict[str, Any]:
    """One shard: `analyze_shard` on this worker, its progress sent to the client as events
    of the run's topic. Returns the engine's figures, the worker and the task's seconds."""
    from distributed import Event, get_worker

    worker = get_worker()
    addr = str(worker.address)
    topic = _topic(run_id)
    try:
        cancel: Any = Event(_cancel_name(run_id))
    except Exception:  # noqa: BLE001 - without the flag the task runs to its end
        cancel = None
    last = {"sent": 0.0, "checked": time.monotonic()}

    def tick(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last["sent"] >= PROGRESS_INTERVAL:
            last["sent"] = now
            worker.log_event(topic, {"shard": shard, "worker": addr, "done": int(done), "total": int(total)})
        if cancel is not None and now - last["checked"] >= CANCEL_CHECK_INTERVAL:
            last["checked"] = now
            try:
                stop = cancel.is_set()
            except Exception:  # noqa: BLE001 - the scheduler is busy or gone: go on
                stop = False
            if stop:
                raise _Cancelled(f"shard {shard} cancelled")
        # The engine holds the GIL between these calls: give the worker's event loop (heartbeats,
        # the events above) its turn.
        time.sleep(0)

    core = engine.load_core()
    t0 = time.perf_counter()
    try:
        text = core.analyze_shard(files, config_json, shard, shards, part_path, tick)
    except ValueError as e:
        raise ValueError(f"worker {addr} ({socket.gethostname()}): {engine._one_line(e)}") from None
    seconds = time.perf_counter() - t0
    stats = json.loads(text)
    total = int(stats.get("input_bytes", 0))
    worker.log_event(topic, {"shard": shard, "worker": addr, "done": total, "total": total})
    return {"stats": stats, "worker": addr, "seconds": seconds, "engine": _engine(core)}


class _Cancelled(Exception):
    """Raised in a task's progress callback when the client gave the run up."""


# --- the client side --------------------------------------------------------------------------


def _engine(core: Any) -> str:
    """The engine's version and build fingerprint: workers must run the same build."""
    return f"{core.version()}+{core.build_id()}"


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UserError("--dask needs dask.distributed: pip install 'smbwire[dask]'") from None
    return distributed


def _connect(distributed: Any, address: str | None, timeout: float) -> tuple[Any, Any]:
    import logging

    if address is None:
        import importlib.util

        dashboard = ":0" if importlib.util.find_spec("bokeh") is not None else None
        try:
            cluster = distributed.LocalCluster(n_workers=engine.default_threads(), threads_per_worker=1,
                                               processes=True, dashboard_address=dashboard,
                                               silence_logs=logging.ERROR)
        except Exception as e:  # noqa: BLE001 - whatever keeps the local cluster from starting
            raise SmbwireError(f"cannot start a local Dask cluster: {engine._one_line(e)}") from None
        return cluster, distributed.Client(cluster)
    try:
        client = distributed.Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as e:
        reason = engine._one_line(e)
        raise UserError(f"dask scheduler {address}: unreachable within {timeout:g} s ({reason})") from None
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError):
        client.close()
        raise UserError(f"dask scheduler {address}: no worker joined within {timeout:g} s") from None
    return None, client


def _close(client: Any, cluster: Any) -> None:
    for thing in (client, cluster):
        if thing is None:
            continue
        try:
            thing.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def _dashboard_link(client: Any) -> str | None:
    try:
        info = client.scheduler_info()
        if "dashboard" not in (info.get("services") or {}):
            return None
        return str(client.dashboard_link)
    except Exception:  # noqa: BLE001 - no dashboard to show
        return None


def _topic(run_id: str) -> str:
    return f"smbwire-progress-{run_id}"


def _cancel_name(run_id: str) -> str:
    return f"smbwire-cancel-{run_id}"


def _state(stage: str, shards: int, shards_done: int, done: Any, input_bytes: int,
           read: Mapping[int, int] | None = None, per_worker: Mapping[str, int] | None = None) -> dict[str, Any]:
    return {
        "stage": stage,
        "shards": shards,
        "shards_done": shards_done,
        "read_bytes": sum((read or {}).values()) if read is not None else input_bytes * shards,
        "total_bytes": input_bytes * shards,
        "input_bytes": input_bytes,
        "workers": dict(per_worker or {}),
    }


def _run_tasks(distributed: Any, client: Any, files: list[str], config_json: str, parts: list[str],
               run_id: str, progress: DaskProgressFn | None) -> list[dict[str, Any]]:
    """Submit one task per shard and wait for all of them; the first failure cancels the rest
    and is raised as one line."""
    n = len(parts)
    lock = threading.Lock()
    read: dict[int, int] = {}  # shard -> bytes read
    owner: dict[int, str] = {}  # shard -> worker address
    total = {"bytes": 0}

    def on_event(event: Any) -> None:
        msg = event[1] if isinstance(event, (tuple, list)) and len(event) == 2 else event
        if not isinstance(msg, dict):
            return
        with lock:
            k = int(msg.get("shard", -1))
            read[k] = int(msg.get("done", 0))
            owner[k] = str(msg.get("worker", "?"))
            total["bytes"] = max(total["bytes"], int(msg.get("total", 0)))

    topic = _topic(run_id)
    client.subscribe_topic(topic, on_event)
    cancel = distributed.Event(_cancel_name(run_id), client=client)
    futures = [
        client.submit(run_shard, files, config_json, k, n, parts[k], run_id,
                      key=f"smbwire-shard-{k}-of-{n}-{run_id}", pure=False, retries=0)
        for k in range(n)
    ]
    try:
        while True:
            states = [f.status for f in futures]
            if progress is not None:
                with lock:
                    per_worker: dict[str, int] = {}
                    for k, b in read.items():
                        per_worker[owner[k]] = per_worker.get(owner[k], 0) + b
                    state = _state("decode", n, states.count("finished"), None, total["bytes"], dict(read), per_worker)
                progress(state)
            failed = [f for f in futures if f.status in ("error", "cancelled")]
            if failed:
                raise _task_error(distributed, failed[0], client)
            if all(s == "finished" for s in states):
                break
            try:
                distributed.wait(futures, timeout=0.2, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
        return [f.result() for f in futures]
    except BaseException:
        try:
            cancel.set()
            client.cancel(futures)
        except Exception:  # noqa: BLE001 - the cluster may be gone
            pass
        raise
    finally:
        try:
            client.unsubscribe_topic(topic)
        except Exception:  # noqa: BLE001
            pass


def _task_error(distributed: Any, future: Any, client: Any) -> BaseException:
    shard = str(future.key).split("-")[2] if str(future.key).startswith("smbwire-shard-") else "?"
    if future.status == "cancelled":
        return SmbwireError(f"shard {shard} was cancelled on the cluster (a worker or the scheduler went away)")
    exc = future.exception()
    killed = getattr(distributed, "KilledWorker", None)
    if killed is not None and isinstance(exc, killed):
        last = getattr(getattr(exc, "last_worker", None), "address", None) or "?"
        return UserError(f"shard {shard}: worker died while running it, on every try (the last: {last}); "
                         "see that worker's log")
    if isinstance(exc, ValueError):
        return InputError(engine._one_line(exc))
    if isinstance(exc, ImportError):
        return UserError(f"shard {shard}: a worker cannot run smbwire ({engine._one_line(exc)}): "
                         "install the same smbwire, with its engine, on every worker")
    if isinstance(exc, _Cancelled):
        return SmbwireError(f"shard {shard}: cancelled")
    return SmbwireError(f"shard {shard} failed: {type(exc).__name__}: {engine._one_line(exc)}")


def _restore_given_paths(result: dict[str, Any], given: Mapping[str, str]) -> None:
    """The tasks read absolute paths (a worker's working directory is not ours); the result
    names each input as the user gave it, as one process's does."""
    changed = {a: g for a, g in given.items() if a != g}
    if not changed:
        return
    for inp in result.get("inputs") or []:
        if isinstance(inp, dict) and inp.get("path") in changed:
            inp["path"] = changed[inp["path"]]
    for key in ("findings", "warnings"):
        items = result.get(key)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if isinstance(item, dict):
                if item.get("path") in changed:
                    item["path"] = changed[item["path"]]
                if isinstance(item.get("message"), str):
                    item["message"] = _replace_paths(item["message"], changed)
            elif isinstance(item, str):
                items[i] = _replace_paths(item, changed)


def _replace_paths(text: str, changed: Mapping[str, str]) -> str:
    for a in sorted(changed, key=len, reverse=True):
        text = text.replace(a, changed[a])
    return text
