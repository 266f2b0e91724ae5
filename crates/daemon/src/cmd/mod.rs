//! One file per subcommand: each takes its parsed arguments, loads what it needs and
//! runs. The roles (`server`, `relay`, `client`) are event loops over the I/O floor
//! (`crate::io`) and the shared runtime (`crate::runtime`).

pub mod address;
pub mod bird_link;
pub mod check_config;
pub mod client;
pub mod client_helper;
pub mod echo_link;
pub mod relay;
pub mod server;
pub mod status;
