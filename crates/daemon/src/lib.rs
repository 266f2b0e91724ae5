//! The parts of the `shipworm` daemon that tools beside it reuse: the UDP batch I/O and
//! socket buffer sizing (the benchmark's traffic generator sends and receives with the
//! same calls as the relay it measures). The binary is `src/main.rs`.

pub mod socket_buffers;
pub mod udp_batch;
