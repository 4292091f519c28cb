//! Tools around the Diameter stack that are not part of the protocol: a
//! human-readable dump of a message, pcap files (writing messages as a TCP
//! connection, reading captures with TCP reassembly), Wireshark's tshark as
//! an independent decoder for interop tests, and the fuzz target's decode
//! path.
//!
//! They live in their own crate so that the `diameter` library is the
//! protocol alone (no subprocesses, capture formats or temporary files in
//! its API), and so that they can only use its public API: each of them
//! reads messages as any other user of the stack would. The PCRF's
//! `decode` and `client` commands and the interop tests of every crate use
//! them.

pub mod dump;
#[doc(hidden)]
pub mod fuzz;
pub mod pcap;
pub mod tshark;
