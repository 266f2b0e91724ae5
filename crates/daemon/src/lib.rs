//! The I/O floor of the `shipworm` daemon as a library: the binary (`src/main.rs`)
//! builds its roles on it, and the benchmark's traffic generator sends and receives
//! with the same calls as the relay it measures.

pub mod io;
