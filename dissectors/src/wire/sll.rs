//! sll
