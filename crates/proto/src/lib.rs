//! # shipworm-proto
//!
//! The middle floor: Teredo's protocol logic as sans-IO state machines. Bytes and the
//! time come in as arguments (`on_udp`, `on_tun`/`on_native`, `on_timer`), and what to
//! send goes out through the caller's [`transmit::Transmit`] — one output contract for
//! the server, the relay and the client, since one input may ask for several outputs (a
//! relay's flushed queue, a client's two bubbles). Nothing here opens a socket, reads a
//! clock or does I/O. That keeps every rule testable with byte vectors and virtual
//! time, and leaves batching, threads and privileges to the daemon. The one call into
//! the OS is for memory: a large peer table asks for an anonymous mapping (with huge
//! pages) rather than the heap (`peer_table::lines`), falling back to the heap.
//!
//! One exception, on purpose: the relay's peer table is shared between worker threads
//! (`relay::SharedRelay`), and its locks live here, per shard, because which entries a
//! packet may touch, and in what order, is protocol logic (a bubble's answer and the
//! queue it releases must see one entry); the daemon only decides how many workers run.
//!
//! No unsafe code, but for one prefetch instruction (`peer_table::prefetch_line`): a
//! batch's look-ups fetch their lines ahead, and no safe form of that exists.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod address_rate;
pub mod bubble_budget;
pub mod client;
pub mod drop_reason;
#[cfg(feature = "fuzzing")]
pub mod exercise;
pub mod first_contact;
pub mod icmp_error;
pub mod kernel_figures;
pub mod local_discovery;
pub mod outcome;
pub mod peer_table;
pub mod port_prediction;
pub mod relay;
pub mod routing_loop;
pub mod secure;
pub mod server;
pub mod server_relay;
pub mod transmit;

pub use drop_reason::{DropCounters, DropReason};
pub use outcome::{Action, Outcome};
