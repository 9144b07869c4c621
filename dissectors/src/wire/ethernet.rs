//! ethernet
