//! `smbwire._core`: the engine as a Python extension module (PyO3). The Python package is the
//! documented surface (`smbwire.engine`); this layer only converts arguments and errors.

use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;

use crate::pipeline::{self, AnalyzeError, Config};

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
    let result = pipeline::analyze_files(&paths, &config, evidence_path.as_deref(), &mut tick);
    if let Some(e) = cb_err {
        return Err(e);
    }
    match result {
        Ok(results) => serde_json::to_string(&results)
            .map_err(|e| PyValueError::new_err(format!("cannot serialise result: {e}"))),
        Err(AnalyzeError::Interrupted) => Err(PyKeyboardInterrupt::new_err("interrupted")),
        Err(e) => Err(PyValueError::new_err(e.to_string())),
    }
}

/// Generate a scenario capture; returns the truth (expected figures) as JSON.
#[pyfunction]
fn synth(spec_json: &str, out_path: &str) -> PyResult<String> {
    crate::synth::synth_json(spec_json, out_path).map_err(PyValueError::new_err)
}

#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(synth, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
