//! Binding a role's UDP socket, with an error that says which directive to change.

use crate::io::udp_socket;
use crate::runtime::Failure;
use socket2::Socket;
use std::net::SocketAddrV4;

/// Where a socket's address and port come from, for the error message.
pub struct Directives {
    /// The directive that sets the address (e.g. `BindAddress`).
    pub address: &'static str,
    /// What else may hold the port, and the directive that moves it.
    pub in_use: &'static str,
}

/// The `what` socket of a role, bound to `addr` (see [`udp_socket::bind`]).
pub fn udp(addr: SocketAddrV4, shared_port: bool, what: &str, from: &Directives) -> Result<Socket, Failure> {
    udp_socket::bind(addr, shared_port).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EADDRNOTAVAIL) => format!("; {} is not an address of this host ({})", addr.ip(), from.address),
            Some(libc::EADDRINUSE) => format!("; {}", from.in_use),
            _ => String::new(),
        };
        Failure::runtime(format!("cannot bind the {what} socket to {addr}: {e}{hint}"))
    })
}

/// The client's and relay's sockets (miredo.conf).
pub const MIREDO_CONF: Directives =
    Directives { address: "BindAddress", in_use: "another program (miredo?) uses that port (BindPort)" };

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_address_names_the_directive() {
        let addr = SocketAddrV4::new(std::net::Ipv4Addr::new(192, 0, 2, 99), 0);
        let e = udp(addr, false, "service", &MIREDO_CONF).unwrap_err();
        assert!(e.message.contains("cannot bind the service socket to 192.0.2.99:0"), "{}", e.message);
        assert!(e.message.contains("not an address of this host (BindAddress)"), "{}", e.message);
    }
}
