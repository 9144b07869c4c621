//! `smbwire._core`: the engine as a Python extension module (PyO3). The Python package is the
//! documented surface (`smbwire.engine`); this layer only converts arguments and errors.

// `#[pyfunction]`'s expansion converts each `PyResult` error to itself (pyo3's macro, not
// this code): the lint fires on every function's signature line.
#![allow(clippy::useless_conversion)]

use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};

/// The engine's allocations (Python's own objects keep pymalloc). With `--threads`, sends are
/// allocated by the decoding workers and freed by the ordered stage: glibc's malloc then takes
/// the worker arena's lock on every such free, and on 4 KiB I/O about 15% of the ordered
/// stage's time went to waiting for it (perf, futex waits under `_int_free`/`malloc`).
/// mimalloc frees another thread's blocks without a lock. Built without its request for
/// transparent huge pages (`no_thp`): with them, 17-22% of the ordered stage's samples on
/// 4 KiB I/O were the kernel zeroing 2 MiB pages as mimalloc touched fresh memory
/// (`clear_page_erms` under `do_huge_pmd_anonymous_page`), 1% without.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use pyo3::prelude::*;

use smbwire_dissectors::dedupe::topology::{self, Topology};

use smbwire_dissectors::pipeline::{AnalyzeError, Config};

/// Runs `f` with a progress tick that honours Ctrl-C and calls `progress(done, total)`;
/// the engine's errors as Python exceptions (one line each).
fn with_tick<T>(
    py: Python<'_>,
    progress: Option<PyObject>,
    f: impl FnOnce(&mut dyn FnMut(u64, u64) -> bool) -> Result<T, AnalyzeError>,
) -> PyResult<T> {
    let mut cb_err: Option<PyErr> = None;
    let mut tick = |done: u64, total: u64| -> bool {
        if let Err(e) = py.check_signals() {
            cb_err = Some(e);
            return false;
        }
        if let Some(cb) = &progress {
            if let Err(e) = cb.call1(py, (done, total)) {
                cb_err = Some(e);
                return false;
            }
        }
        true
    };
    let result = f(&mut tick);
    if let Some(e) = cb_err {
        return Err(e);
    }
    match result {
        Ok(v) => Ok(v),
        Err(AnalyzeError::Interrupted) => Err(PyKeyboardInterrupt::new_err("interrupted")),
        Err(e) => Err(PyValueError::new_err(e.to_string())),
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyValueError::new_err(format!("cannot serialise result: {e}")))
}

/// Analyse capture files; returns the result as a JSON string (schema "smbwire/1").
/// `progress(done_bytes, total_bytes)` is called every few MiB of input.
/// Raises ValueError with one clear line when nothing can be analysed.
#[pyfunction]
#[pyo3(signature = (paths, config_json, evidence_path=None, progress=None))]
fn analyze(
    py: Python<'_>,
    paths: Vec<String>,
    config_json: &str,
    evidence_path: Option<String>,
    progress: Option<PyObject>,
) -> PyResult<String> {
    let config = Config::from_json(config_json).map_err(PyValueError::new_err)?;
    let r = with_tick(py, progress, |tick| {
        smbwire_dissectors::parallel::analyze_files(&paths, &config, evidence_path.as_deref(), tick)
    })?;
    to_json(&r)
}

/// Rerun dedupe and attribution from send ledgers (`analyze --ledger`) under the config's
/// topology, window and top-N; returns the result as a JSON string (schema "smbwire/1").
#[pyfunction]
#[pyo3(signature = (paths, config_json, evidence_path=None))]
fn attribute(py: Python<'_>, paths: Vec<String>, config_json: &str, evidence_path: Option<String>) -> PyResult<String> {
    let config = Config::from_json(config_json).map_err(PyValueError::new_err)?;
    let r = with_tick(py, None, |tick| {
        smbwire_dissectors::attribute::attribute_files(&paths, &config, evidence_path.as_deref(), tick)
    })?;
    to_json(&r)
}

/// One decoding task of `analyze --dask`: shard `shard` of `shards` of `paths` (every input
/// read, the shard's connections decoded), its ledger part written to `part_path`. Returns the
/// task's figures as JSON (docs/ledger.md "Ledger parts").
#[pyfunction]
#[pyo3(signature = (paths, config_json, shard, shards, part_path, progress=None))]
fn analyze_shard(
    py: Python<'_>,
    paths: Vec<String>,
    config_json: &str,
    shard: usize,
    shards: usize,
    part_path: &str,
    progress: Option<PyObject>,
) -> PyResult<String> {
    let config = Config::from_json(config_json).map_err(PyValueError::new_err)?;
    let tag = smbwire_dissectors::distributed::config_tag(config_json);
    let r = with_tick(py, progress, |tick| {
        smbwire_dissectors::distributed::analyze_shard(&paths, &config, shard, shards, &tag, part_path, tick)
    })?;
    to_json(&r)
}

/// The ordered stage of `analyze --dask` over every shard's part: the result JSON `analyze`
/// gives on the same inputs and options.
#[pyfunction]
#[pyo3(signature = (parts, config_json, evidence_path=None))]
fn merge_parts(py: Python<'_>, parts: Vec<String>, config_json: &str, evidence_path: Option<String>) -> PyResult<String> {
    let config = Config::from_json(config_json).map_err(PyValueError::new_err)?;
    let r = with_tick(py, None, |tick| {
        smbwire_dissectors::distributed::merge_parts(&parts, &config, evidence_path.as_deref(), tick)
    })?;
    to_json(&r)
}

/// `analyze --annotate`: write `out` (pcapng) with every frame of `paths` (the analysed inputs,
/// in the analysis' order) and a comment on each frame of each send in the evidence file.
/// Returns the stats as JSON (`frames_written`, `frames_commented`, `sends`, `interfaces`).
#[pyfunction]
fn annotate(py: Python<'_>, paths: Vec<String>, evidence_path: &str, out_path: &str) -> PyResult<String> {
    let r = py.allow_threads(|| smbwire_dissectors::annotate::annotate_files(&paths, evidence_path, out_path));
    match r {
        Ok(s) => serde_json::to_string(&s).map_err(|e| PyValueError::new_err(e.to_string())),
        Err(e) => Err(PyValueError::new_err(e)),
    }
}

// The macro's expansion tests a pyo3 feature this crate does not declare.
#[allow(unexpected_cfgs)]
mod exceptions {
    use pyo3::exceptions::PyValueError;
    pyo3::create_exception!(
        _core,
        TopologyError,
        PyValueError,
        "A topology that cannot be used; the message is one line (`FILE: line N: key: what`)."
    );
}
use exceptions::TopologyError;

/// Read and check a topology file (docs/topology.md); returns its config object as JSON
/// (`{"nodes": [{"name", "addresses", "member"}], "rules": [{"share", "file", "class"}]}`).
/// Raises TopologyError with one line naming the file and the line.
/// `Err(ValueError)` with one line when an output (`(option, path)`) is one of `inputs` or
/// another output, by any name (`outputs::check`); the command line asks before a run.
#[pyfunction]
fn check_outputs(outputs: Vec<(String, String)>, inputs: Vec<String>) -> PyResult<()> {
    let outputs: Vec<(&str, &str)> = outputs.iter().map(|(o, p)| (o.as_str(), p.as_str())).collect();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    smbwire_dissectors::outputs::check(&outputs, &inputs).map_err(PyValueError::new_err)
}

/// `Err(ValueError)` with one line when `path` cannot be an output file (a directory, a
/// directory that does not exist, no permission; `outputs::check_writable`).
#[pyfunction]
fn check_writable(path: &str) -> PyResult<()> {
    smbwire_dissectors::outputs::check_writable(path).map_err(PyValueError::new_err)
}

/// Write `data` as the whole of the output file `path`, atomically (`outputs::write_whole`):
/// the command line's `--json`, `--csv`, `--html` and `synth --topology-out/--truth-out`.
/// `Err(ValueError)` with one line.
#[pyfunction]
fn write_output(py: Python<'_>, path: &str, data: &[u8]) -> PyResult<()> {
    py.allow_threads(|| smbwire_dissectors::outputs::write_whole(path, data, 0o666)).map_err(PyValueError::new_err)
}

#[pyfunction]
fn load_topology(path: &str) -> PyResult<String> {
    let t = topology::load_file(path).map_err(TopologyError::new_err)?;
    Ok(t.config_json().to_string())
}

/// `load_topology` on TOML text; `source` names it in the error.
#[pyfunction]
#[pyo3(signature = (text, source="topology.toml"))]
fn parse_topology(text: &str, source: &str) -> PyResult<String> {
    let t = Topology::from_toml(text).map_err(|e| TopologyError::new_err(format!("{source}: {e}")))?;
    Ok(t.config_json().to_string())
}

/// Check a topology config object (JSON text, the shape `load_topology` returns); returns it
/// normalised. Raises TopologyError.
#[pyfunction]
#[pyo3(signature = (config_json, source="topology"))]
fn check_topology(config_json: &str, source: &str) -> PyResult<String> {
    let v: serde_json::Value =
        serde_json::from_str(config_json).map_err(|e| TopologyError::new_err(format!("{source}: not JSON: {e}")))?;
    let t = Topology::from_json(&v).map_err(|e| TopologyError::new_err(format!("{source}: {e}")))?;
    Ok(t.config_json().to_string())
}

/// A topology config object (JSON text) as a TOML file `load_topology` reads back.
#[pyfunction]
fn topology_to_toml(config_json: &str) -> PyResult<String> {
    let v: serde_json::Value = serde_json::from_str(config_json).map_err(|e| TopologyError::new_err(format!("topology: not JSON: {e}")))?;
    let t = Topology::from_json(&v).map_err(|e| TopologyError::new_err(format!("topology: {e}")))?;
    Ok(t.to_toml())
}

/// The byte accounting categories, as JSON: `[{"name", "description", "disposition"}]`
/// (disposition: overhead, payload, removed, not_analysed, other), in the docs' order.
#[pyfunction]
fn byte_categories() -> String {
    serde_json::to_string(smbwire_dissectors::accounting::CATEGORIES).unwrap_or_default()
}

/// The traffic classes, as JSON: `[{"name", "label", "description", "rule"}]`, in report
/// order; `rule`: a topology rule may assign it (`write`/`read` only say it is not known).
#[pyfunction]
fn traffic_classes() -> String {
    use smbwire_dissectors::dedupe::attribution::Class;
    let v: Vec<serde_json::Value> = Class::REPORT_ORDER
        .iter()
        .map(|c| serde_json::json!({"name": c.name(), "label": c.label(), "description": c.description(), "rule": Class::DECIDED.contains(c)}))
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// The tunnel kinds `analyze` and `live` open, as JSON `[{"name", "label"}]`: `name` as in the
/// result's `tunnels` keys (two joined by `+`) and the metrics' `kind` label.
#[pyfunction]
fn tunnel_kinds() -> String {
    use smbwire_dissectors::wire::Tunnel;
    let v: Vec<serde_json::Value> =
        Tunnel::ALL.iter().map(|t| serde_json::json!({"name": t.name(), "label": t.label()})).collect();
    serde_json::Value::Array(v).to_string()
}

/// The finding codes the engine emits and the figures each carries, as JSON
/// `[{"code", "fields": [...]}]` (docs/json-schema.md `findings`).
#[pyfunction]
fn finding_codes() -> String {
    let v: Vec<serde_json::Value> = smbwire_dissectors::findings::CODES
        .iter()
        .map(|(code, fields)| serde_json::json!({"code": code, "fields": fields}))
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// The findings a result (JSON text) gives: `[{"code", <figures>, "message"}]` as JSON. The
/// engine puts them in every result; this is for results written by hand (tests).
#[pyfunction]
fn derive_findings(result_json: &str) -> PyResult<String> {
    let v: serde_json::Value = serde_json::from_str(result_json).map_err(|e| PyValueError::new_err(format!("not JSON: {e}")))?;
    Ok(serde_json::to_string(&smbwire_dissectors::findings::derive(&v)).unwrap_or_default())
}

/// The synthesizer's scenarios as JSON: `[{"name", "description"}]`.
#[pyfunction]
fn synth_scenarios() -> String {
    let v: Vec<serde_json::Value> = smbwire_synth::scenario::SCENARIOS
        .iter()
        .map(|(name, description)| serde_json::json!({"name": name, "description": description}))
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// Generate a scenario capture; returns the truth (expected figures) as JSON.
#[pyfunction]
fn synth(spec_json: &str, out_path: &str) -> PyResult<String> {
    smbwire_synth::synth_json(spec_json, out_path).map_err(|e| {
        if e == smbwire_synth::INTERRUPTED {
            PyKeyboardInterrupt::new_err("interrupted")
        } else {
            PyValueError::new_err(e)
        }
    })
}

#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Fingerprint of the engine's sources (16 hex digits; `report::ENGINE_BUILD`).
#[pyfunction]
fn build_id() -> &'static str {
    smbwire_dissectors::report::ENGINE_BUILD
}

/// A live capture session (`smbwire live`): the capture and analysis run on an engine
/// thread; Python polls snapshots and stops it. Options (JSON, every key optional):
/// `{"tcp_ports": [8445] (added to 445 and 5445), "snaplen": N, "promisc": true, "require_ebpf": false,
/// "force_af_packet": false, "hook": "auto"|"tcx"|"xdp", "xdp_drop": false,
/// "drop_privileges": false, "user": null, "history_seconds": 300, "interval_seconds": 1.0,
/// "write": {"path": "cap.pcapng", "size_limit": 0, "count": 10}}`.
/// Raises PermissionError (missing capability, named), ValueError for bad options or a
/// missing interface, OSError otherwise.
#[cfg(target_os = "linux")]
#[pyclass(name = "LiveSession", module = "smbwire._core")]
struct PyLiveSession {
    inner: std::sync::Mutex<smbwire_dissectors::live::session::LiveSession>,
    backend: &'static str,
    hook: Option<&'static str>,
    fallback_reason: Option<String>,
}

#[cfg(target_os = "linux")]
#[pymethods]
impl PyLiveSession {
    #[new]
    fn new(py: Python<'_>, iface: String, options_json: &str, config_json: &str) -> PyResult<Self> {
        let config = Config::from_json(config_json).map_err(PyValueError::new_err)?;
        let opts = live_options(options_json).map_err(PyValueError::new_err)?;
        let session = py
            .allow_threads(|| smbwire_dissectors::live::session::LiveSession::start(&iface, opts, config))
            .map_err(live_error)?;
        Ok(PyLiveSession {
            backend: session.backend().name(),
            hook: session.hook().map(|h| h.hook.name()),
            fallback_reason: session.fallback_reason().map(str::to_string),
            inner: std::sync::Mutex::new(session),
        })
    }

    /// The newest snapshot JSON not returned before, waiting up to `timeout` seconds; None
    /// when there is none yet.
    #[pyo3(signature = (timeout=0.0))]
    fn poll(&self, py: Python<'_>, timeout: f64) -> Option<String> {
        let wait = std::time::Duration::from_secs_f64(timeout.clamp(0.0, 3600.0));
        py.allow_threads(|| {
            let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            s.poll(wait).map(|t| t.to_string())
        })
    }

    /// True when the capture thread ended by itself (a capture error): call `stop`.
    #[getter]
    fn finished(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).is_finished()
    }

    /// Stops the capture and returns the final result JSON (schema "smbwire/1" with a "live"
    /// section).
    fn stop(&self, py: Python<'_>) -> PyResult<String> {
        py.allow_threads(|| self.inner.lock().unwrap_or_else(|e| e.into_inner()).stop())
            .map_err(pyo3::exceptions::PyOSError::new_err)
    }

    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// The eBPF hook in use ("tcx" or "xdp"); None with AF_PACKET.
    #[getter]
    fn hook(&self) -> Option<&'static str> {
        self.hook
    }

    #[getter]
    fn fallback_reason(&self) -> Option<String> {
        self.fallback_reason.clone()
    }
}

#[cfg(target_os = "linux")]
fn live_error(e: smbwire_dissectors::live::LiveError) -> PyErr {
    use smbwire_dissectors::live::LiveError;
    match &e {
        LiveError::Permission { .. } => pyo3::exceptions::PyPermissionError::new_err(e.to_string()),
        LiveError::NoSuchInterface(_) => PyValueError::new_err(e.to_string()),
        LiveError::Unsupported(_) => pyo3::exceptions::PyNotImplementedError::new_err(e.to_string()),
        LiveError::Io(_) => pyo3::exceptions::PyOSError::new_err(e.to_string()),
    }
}

#[cfg(target_os = "linux")]
fn live_options(text: &str) -> Result<smbwire_dissectors::live::session::SessionOptions, String> {
    use smbwire_dissectors::live::rotate::WriteOptions;
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid live options: {e}"))?;
    let mut o = smbwire_dissectors::live::session::SessionOptions::default();
    let flag = |k: &str, d: bool| -> Result<bool, String> {
        match v.get(k) {
            None | Some(serde_json::Value::Null) => Ok(d),
            Some(x) => x.as_bool().ok_or(format!("{k} must be true or false")),
        }
    };
    o.live.promisc = flag("promisc", o.live.promisc)?;
    o.live.require_ebpf = flag("require_ebpf", false)?;
    o.live.force_af_packet = flag("force_af_packet", false)?;
    if o.live.require_ebpf && o.live.force_af_packet {
        return Err("require_ebpf and force_af_packet exclude each other".into());
    }
    if let Some(h) = v.get("hook").filter(|h| !h.is_null()) {
        o.live.hook = h.as_str().ok_or("hook must be a string")?.parse()?;
    }
    o.live.xdp_drop = flag("xdp_drop", false)?;
    if flag("drop_privileges", false)? {
        let user = match v.get("user").filter(|u| !u.is_null()) {
            Some(u) => Some(u.as_str().ok_or("user must be a string")?.to_string()),
            None => None,
        };
        o.privileges = Some(smbwire_dissectors::live::session::PrivilegeOptions { user });
    } else if v.get("user").is_some_and(|u| !u.is_null()) {
        return Err("user needs drop_privileges".into());
    }
    // Ports the user names add to the defaults (`live::tcp_ports_with`).
    if let Some(p) = v.get("tcp_ports").filter(|p| !p.is_null()) {
        let extra = p
            .as_array()
            .ok_or("tcp_ports must be a list")?
            .iter()
            .map(|x| x.as_u64().filter(|n| *n > 0 && *n < 65536).map(|n| n as u16))
            .collect::<Option<Vec<_>>>()
            .ok_or("tcp_ports must hold port numbers")?;
        o.live.tcp_ports = smbwire_dissectors::live::tcp_ports_with(&extra);
    }
    if let Some(n) = v.get("snaplen").and_then(|n| n.as_u64()) {
        o.live.snaplen = n.min(u32::MAX as u64) as u32;
    }
    // Capture queues: absent or 0, one per decoding worker (the session decides).
    o.live.queues = match v.get("queues").filter(|q| !q.is_null()) {
        None => 0,
        Some(q) => q
            .as_u64()
            .filter(|n| (1..=u64::from(smbwire_dissectors::live::MAX_QUEUES)).contains(n))
            .ok_or(format!("queues must be between 1 and {}", smbwire_dissectors::live::MAX_QUEUES))?
            as u32,
    };
    o.live.shed = flag("shed", true)?;
    if let Some(n) = v.get("ring_bytes").filter(|n| !n.is_null()) {
        o.live.ring_bytes = n
            .as_u64()
            .filter(|n| (4096..=1 << 30).contains(n))
            .ok_or("the ring size (--ring-size, ring_bytes) must be between 4 KiB and 1 GiB")? as u32;
        // AF_PACKET: that much in blocks of block_size, at least two.
        o.live.block_count = (o.live.ring_bytes / o.live.block_size).max(2);
    }
    if let Some(n) = v.get("test_frame_delay_us").and_then(|n| n.as_f64()) {
        if !(0.0..=1e6).contains(&n) {
            return Err("test_frame_delay_us must be between 0 and 1e6".into());
        }
        o.frame_delay = std::time::Duration::from_secs_f64(n / 1e6);
    }
    if let Some(n) = v.get("history_seconds").and_then(|n| n.as_u64()) {
        o.history_seconds = n.clamp(1, 86_400) as usize;
    }
    if let Some(n) = v.get("interval_seconds").and_then(|n| n.as_f64()) {
        if !(0.05..=3600.0).contains(&n) {
            return Err("interval_seconds must be between 0.05 and 3600".into());
        }
        o.interval = std::time::Duration::from_secs_f64(n);
    }
    if let Some(w) = v.get("write").filter(|w| !w.is_null()) {
        let path = w.get("path").and_then(|p| p.as_str()).ok_or("write.path must be a string")?;
        o.write = Some(WriteOptions {
            path: path.into(),
            size_limit: w.get("size_limit").and_then(|n| n.as_u64()).unwrap_or(0),
            count: w.get("count").and_then(|n| n.as_u64()).unwrap_or(10).clamp(1, 100_000) as usize,
            snaplen: o.live.snaplen,
        });
    }
    Ok(o)
}

/// Is a signal (Ctrl-C) pending for the interpreter? Runs Python's handlers: with the default
/// SIGINT handler that raises KeyboardInterrupt, which `analyze` reports as such. Called by
/// the engine while it waits on a silent stream (stdin, FIFO).
fn signal_pending() -> bool {
    Python::with_gil(|py| py.check_signals().is_err())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    smbwire_dissectors::capture::interrupt::set_check(signal_pending);
    // Before any thread of ours exists (see the function).
    smbwire_dissectors::parallel::one_malloc_arena();
    #[cfg(target_os = "linux")]
    m.add_class::<PyLiveSession>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(attribute, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_shard, m)?)?;
    m.add_function(wrap_pyfunction!(merge_parts, m)?)?;
    m.add_function(wrap_pyfunction!(annotate, m)?)?;
    m.add_function(wrap_pyfunction!(synth, m)?)?;
    m.add_function(wrap_pyfunction!(synth_scenarios, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(build_id, m)?)?;
    m.add_function(wrap_pyfunction!(check_outputs, m)?)?;
    m.add_function(wrap_pyfunction!(check_writable, m)?)?;
    m.add_function(wrap_pyfunction!(write_output, m)?)?;
    m.add_function(wrap_pyfunction!(load_topology, m)?)?;
    m.add_function(wrap_pyfunction!(parse_topology, m)?)?;
    m.add_function(wrap_pyfunction!(check_topology, m)?)?;
    m.add_function(wrap_pyfunction!(topology_to_toml, m)?)?;
    m.add_function(wrap_pyfunction!(byte_categories, m)?)?;
    m.add_function(wrap_pyfunction!(traffic_classes, m)?)?;
    m.add_function(wrap_pyfunction!(tunnel_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(derive_findings, m)?)?;
    m.add_function(wrap_pyfunction!(finding_codes, m)?)?;
    m.add("TopologyError", m.py().get_type_bound::<TopologyError>())?;
    Ok(())
}
