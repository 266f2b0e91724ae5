//! # shipworm-proto
//!
//! The middle floor: Teredo's protocol logic as sans-IO state machines. Bytes and the
//! time come in as arguments (`on_udp`, `on_tun`/`on_native`, `on_timer`), and what to
//! do comes back as a value naming a caller-provided buffer; nothing here opens a
//! socket, reads a clock or touches the OS. That keeps every rule testable with byte
//! vectors and virtual time, and leaves batching, threads and privileges to the daemon.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod drop_reason;
pub mod first_contact;
pub mod icmp_error;
pub mod peer_table;
pub mod relay;
pub mod secure;
pub mod server;
pub mod transmit;

pub use drop_reason::{DropCounters, DropReason};
