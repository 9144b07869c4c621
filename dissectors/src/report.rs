//! The result of an analysis: one serialisable model that feeds the terminal report, the
//! JSON file (`"schema": "smbwire/1"`, documented in docs/json-schema.md) and the live TUI.
