//! The figures the kernel data path's programs judge trusted peers by, as the state
//! machines do: handed to them in their configuration at load (the daemon's, the
//! benchmark's, the tests'), never written again in C.

use crate::client::RELAY_SILENCE;
use crate::peer_table::VALIDITY;
use crate::relay::KERNEL_HEARD_GRAIN;
use shipworm_wire::teredo_addr::{PREFIX, PREFIX_EXPERIMENTAL};
use std::time::Duration;

/// In order: a peer's validity (RFC 4380 §5.2.4), the grain of its last-heard time, a
/// client's native peer's silence before it is tested again, and the Teredo prefixes'
/// first 32 bits (RFC 4380's, the experimental one).
pub const KERNEL_FIGURES: (Duration, Duration, Duration, [[u8; 4]; 2]) =
    (VALIDITY, KERNEL_HEARD_GRAIN, RELAY_SILENCE, [PREFIX.to_be_bytes(), PREFIX_EXPERIMENTAL.to_be_bytes()]);
