//! What every role's daemon shares around its event loop: the error it exits with,
//! logging, when to busy-poll, dropping privileges, confinement (seccomp, no_new_privs), signals (and SIGHUP's reload), the pid file, the status socket, the
//! table of counters every view of them is made from, and the
//! background resolution of server names.

pub mod bind;
pub mod busy_poll;
pub mod config_reader;
pub mod confinement;
pub mod counters;
pub mod error;
pub mod file_access;
pub mod holder;
pub mod inherited;
pub mod logging;
pub mod metrics;
pub mod pidfile;
pub mod privileges;
pub mod random;
pub mod reload;
pub mod report;
pub mod role_loop;
pub mod server_names;
pub mod service_manager;
pub mod shell;
pub mod signals;
pub mod status_socket;
pub mod syscalls;
pub mod wait;

pub use error::Failure;
