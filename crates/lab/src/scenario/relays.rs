//! Relays of other kinds: a 6to4 peer through the relay, a server that relays too, a
//! host-specific relay whose host gets a new address.

use super::*;

/// A 6to4 host (RFC 4380 §5.2.9's other kind of peer) and a client behind a
/// port-restricted NAT: [`exchange`] from step 5. The 6to4 host's packets cross a 6to4
/// relay router to reach the native side, and the Teredo relay's go back through it
/// ([`crate::sixtofour`]).
pub fn run_sixtofour(server: &Impl, relay: &Impl, client: &Impl, first: Side, bytes: usize) -> Result<(Lab, Exchange)> {
    let spec = LabSpec { sixtofour: true, ..LabSpec::nats(vec![(NatKind::PortRestricted, 1)]) };
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    let address = start_roles(&mut lab, server, relay, client)?;
    let h64 = lab.ns("h64");
    let peer = Peer { ns: &h64, addr: crate::sixtofour::HOST_V6, what: "6to4 host" };
    let x = exchange(&lab, &peer, address, first, 5, bytes)?;
    Ok((lab, x))
}

/// A server that relays too (shipworm's `ServerRelay yes`, RFC 4380 §5.4.3) and no
/// other relay: the native host routes 2001::/32 to the server, and everything between
/// the client and the native host passes the server's address and port 3544.
/// [`exchange`] from step 4.
pub fn run_server_relay(server: &Impl, client: &Impl, first: Side, bytes: usize) -> Result<(Lab, Exchange)> {
    let mut lab =
        Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
    lab.route_teredo_through_server().map_err(|e| step(1, "route 2001::/32 to the server", e))?;
    let extra = if matches!(server, Impl::Shipworm(_)) { "ServerRelay yes\nInterfaceName tsrv\n" } else { "" };
    lab.start_server_with(server, extra).map_err(|e| step(2, "start the server", e))?;
    lab.start_client(0, client).map_err(|e| step(3, "start the client", e))?;
    let address = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
    let h6 = lab.ns("h6");
    let x = exchange(&lab, &Peer { ns: &h6, addr: HOST6_V6, what: "native host" }, address, first, 4, bytes)?;
    Ok((lab, x))
}

/// A host-specific relay (shipworm's `RelayType host`) on the relay host, and a client:
/// the client reaches the host's address (step 5, a single first echo); an address the
/// host gets afterwards (as SLAAC or a temporary address would come) is reached too
/// (step 6, a single first echo, after 1 s). Returns both round trips, ms.
pub fn run_host_relay_new_address(server: &Impl, client: &Impl) -> Result<(Lab, (f64, f64))> {
    let mut lab =
        Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    let me = Impl::Shipworm(match client {
        Impl::Shipworm(b) => b.clone(),
        Impl::Miredo => match server {
            Impl::Shipworm(b) => b.clone(),
            Impl::Miredo => return err("no shipworm binary to run the host-specific relay"),
        },
    });
    lab.start_host_relay(&me).map_err(|e| step(3, "start the host-specific relay", e))?;
    lab.start_client(0, client).map_err(|e| step(4, "start the client", e))?;
    lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(4, "qualify the client", e))?;
    let ns = lab.clients[0].ns.clone();
    let first = first_contact(&ns, crate::RELAY_V6, "client → the relay host", &mut |_| {})
        .map_err(|e| step(5, "first contact client → the relay host", e))?;
    let added = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x99);
    Lab::addr(&lab.ns("rly"), &format!("{added}/64"), "eth0").map_err(|e| step(6, "add an address", e))?;
    std::thread::sleep(Duration::from_secs(1));
    let later = first_contact(&ns, added, "client → the relay host's new address", &mut |_| {})
        .map_err(|e| step(6, "first contact client → the relay host's new address", e))?;
    Ok((lab, (first, later)))
}
