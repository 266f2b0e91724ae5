//! The client's TUN interface as its helper configured it, kept in step with the state
//! machine's events.

use crate::cmd::client_helper::Helper;
use crate::io::netlink::Netlink;
use crate::runtime::Failure;
use nix::poll::{PollFd, PollFlags};
use shipworm_proto::client::ClientEvent;
use shipworm_side_wire::helper_request::Request;
use shipworm_wire::teredo_addr::TeredoAddr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// The interface, and the helper that configures it (it keeps CAP_NET_ADMIN).
pub struct Interface {
    /// Read only: the attached subnets.
    pub nl: Netlink,
    pub helper: Helper,
    pub name: String,
    pub address: Option<Ipv6Addr>,
    /// When the network last changed, to say how long the new address took.
    pub changed_at: Option<Instant>,
}

impl Interface {
    /// Carry out an event. `Err(Failure)` only when the helper is gone.
    pub fn apply(&mut self, ev: ClientEvent) -> Result<(), Failure> {
        match ev {
            ClientEvent::Up { address, mtu, server, nat } => {
                if self.address != Some(address) {
                    if let Err(e) = self.helper.ask(Request::Up { address, mtu })? {
                        tracing::error!("configuring {}: {e}", self.name);
                        return Ok(());
                    }
                    self.address = Some(address);
                    let mapped = TeredoAddr::decode(&address).map(|t| t.mapped.to_string()).unwrap_or_default();
                    let took = self
                        .changed_at
                        .take()
                        .map(|t| format!(", {:.0} ms after the network change", t.elapsed().as_secs_f64() * 1000.0));
                    tracing::info!(
                        "qualified: {address} on {} (server {server}, mapped {mapped}, NAT {}, MTU {mtu}){}",
                        self.name,
                        nat.as_str(),
                        took.unwrap_or_default()
                    );
                }
            }
            ClientEvent::Down(why) => {
                if self.address.take().is_some() {
                    if let Err(e) = self.helper.ask(Request::Down)? {
                        tracing::error!("configuring {}: {e}", self.name);
                    }
                }
                tracing::warn!("no Teredo connectivity: {why}");
            }
            ClientEvent::Nat(kind) => tracing::info!("NAT kind: {}", kind.as_str()),
            ClientEvent::KeyRetired { server } => tracing::warn!(
                "server {server} says the key of this client's identifier is retired (RFC 4380 §5.3.2): \
                 get a new identifier and secret from its operator and set them in SecureQualification; \
                 soliciting on (counted as key_retired)"
            ),
        }
        Ok(())
    }

    /// The helper's end of the socket is readable only when it closed (it speaks only
    /// when asked): then the client stops too, and a supervisor restarts both.
    pub fn check_helper(&self) -> Result<(), Failure> {
        let mut fd = [PollFd::new(self.helper.as_fd(), PollFlags::POLLIN)];
        if nix::poll::poll(&mut fd, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0) {
            return Err(Failure::runtime(format!(
                "the interface helper (pid {}) stopped: stopping too (a supervisor restarts the client)",
                self.helper.pid()
            )));
        }
        Ok(())
    }

    /// The IPv4 subnets the host is attached to, for the client's CVE-2006-6264 check
    /// (none, with a warning, if they cannot be listed).
    pub fn attached_subnets(&self) -> Vec<(Ipv4Addr, u8)> {
        self.nl.ipv4_subnets().unwrap_or_else(|e| {
            tracing::warn!("cannot list the host's IPv4 subnets ({e}): peers on them are not told apart");
            Vec::new()
        })
    }
}
