//! Configuration files in Miredo's format: the shared `Directive value` reader and
//! value checks (`directives`), the client and relay file (`miredo`), the server file
//! (`server`).

pub mod directives;
pub mod miredo;
pub mod server;
