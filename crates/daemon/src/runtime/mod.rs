//! What every role's daemon shares around its event loop: the error it exits with,
//! logging, dropping privileges, signals, the pid file, the status socket and the
//! background resolution of server names.

pub mod error;
pub mod logging;
pub mod pidfile;
pub mod privileges;
pub mod server_names;
pub mod signals;
pub mod status_socket;

pub use error::Failure;
