//! Bounded parsers of what the daemon hears beside Teredo, from its own host and LAN:
//! the client's requests to its interface helper, BIRD's answers on its control socket,
//! scrapes of the metrics endpoint, and the gateway's SSDP, HTTP and UPnP answers. The
//! packet formats of the tunnel itself are `shipworm-wire`'s. Each parser takes bytes
//! someone else chose; none can panic, and none allocates beyond its input.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bird_reply;
// The fuzz harnesses are shared by the property tests and `fuzz/`, and are no API for
// anyone else: a feature keeps them out of ordinary builds.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod exercise;
pub mod helper_request;
pub mod http_answer;
pub mod metrics_request;
pub mod upnp_description;
