//! netbios
