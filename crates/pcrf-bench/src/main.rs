//! The `pcrf-bench` command line.

fn main() {}
