//! What the client tells the world: its table of counters, its status document, its
//! status line and the samples of its state.

use super::ClientDaemon;
use crate::runtime::counters::Counters;
use crate::runtime::metrics::Sample;
use crate::runtime::report::{IoErrors, TunOffloadCounts};
use crate::runtime::shell::Reports;
use shipworm_proto::client::{ClientState, ClientStats};
use shipworm_wire::teredo_addr::TeredoAddr;

/// The client's counters: every view of them (`/metrics`, the status JSON, the log
/// line) is made from this one table.
pub(crate) fn counters(
    st: &ClientStats,
    peers: usize,
    first_contacts_waiting: usize,
    io: &IoErrors,
    tun: &TunOffloadCounts,
    kernel: Option<&([u64; shipworm_kernel_path::COUNTERS], u64)>,
) -> Counters {
    const PACKETS: &str = "Packets sent to Teredo peers and delivered to this host, the kernel data path's \
                           included (its part: kernel_path_packets, outcome forwarded; a train counts once).";
    const BYTES: &str = "IPv6 bytes sent to Teredo peers and delivered to this host, the kernel data path's included.";
    use shipworm_kernel_path::Counter;
    let k = |c: Counter| kernel.map_or(0, |(k, _)| k[c as usize]);
    let mut t = Counters::new("client");
    t.counter("router_solicitations", "Router solicitations sent.", st.solicitations);
    t.counter("router_advertisements", "Router advertisements accepted.", st.advertisements);
    t.counter("address_changes", "Addresses configured or changed (qualifications, handoffs).", st.addresses);
    t.counter("packets", PACKETS, st.sent + k(Counter::EncapForwarded)).label("direction", "to_peers");
    t.counter("packets", PACKETS, st.delivered + k(Counter::DecapForwarded)).label("direction", "to_host");
    t.counter("bytes", BYTES, st.sent_bytes + k(Counter::EncapBytes)).label("direction", "to_peers");
    t.counter("bytes", BYTES, st.delivered_bytes + k(Counter::DecapBytes)).label("direction", "to_host");
    t.counter("bubbles", "Bubbles sent.", st.bubbles);
    t.counter(
        "bubbles_withheld",
        "Bubbles withheld: the peer had its 4 of the kind in 300 s without answering (RFC 4380 §5.2.6).",
        st.bubbles_withheld,
    );
    t.counter("echoes", "Connectivity-test echoes sent.", st.echoes);
    t.counter("first_contacts", "Native hosts that spoke first, tested.", st.first_contacts);
    t.counter(
        "first_contact_delivered",
        "Packets of native hosts that spoke first, delivered once their test passed.",
        st.first_contact_delivered,
    );
    t.counter(
        "silent_retests",
        "Native hosts tested again after falling silent while sent to (their relay may have gone).",
        st.silent_retests,
    );
    t.counter(
        "peer_solicitations",
        "Server Load Reduction: silent peers asked directly (RFC 6081 §5.7).",
        st.peer_solicitations,
    );
    t.counter("peer_advertisements", "Server Load Reduction: peers' solicitations answered.", st.peer_advertisements);
    t.counter("echo_tests", "Echo Tests run to predict a sequential NAT's port (RFC 6081 §5.5).", st.echo_tests);
    t.gauge("peers", "Peers in the client's list.", peers as u64);
    t.gauge(
        "first_contacts_waiting",
        "Native hosts that spoke first, waiting for their test.",
        first_contacts_waiting as u64,
    );
    if let Some((k, refused)) = kernel {
        crate::runtime::report::kernel_rows(&mut t, k, *refused);
    }
    t.drops(&st.drops);
    t.io_errors(io);
    t.tun_offloads(tun);
    t
}

impl Reports for ClientDaemon<'_> {
    fn counters(&self) -> Counters {
        let s = self.client.status();
        let (io, tun) = (self.out.io_errors(self.tun_read), self.out.offloads(self.tun_read));
        let kernel = self.kernel.map(|k| (k.counters(), k.refused.load(std::sync::atomic::Ordering::Relaxed)));
        counters(self.client.stats(), s.peers, s.first_contacts, &io, &tun, kernel.as_ref())
    }

    fn status_json(&self) -> String {
        let s = self.client.status();
        let decoded = s.address.and_then(|a| TeredoAddr::decode(&a)).map(|t| {
            serde_json::json!({"server": t.server.to_string(), "mapped": t.mapped.to_string(), "random_bits": t.flags.random_bits()})
        });
        let waiting: Vec<&str> = self.names.failing().iter().map(|(n, _)| n.as_str()).collect();
        serde_json::json!({
            "role": "client",
            "interface": self.iface.name,
            "state": s.state.as_str(),
            "waiting_for": waiting,
            "server_names": self.names.json(),
            "address": s.address.map(|a| a.to_string()),
            "decoded": decoded,
            "server": s.server.map(|a| a.to_string()),
            "mapped": s.mapped.map(|a| a.to_string()),
            "nat": s.nat.as_str(),
            "nat_behaviour": {
                "kind": s.nat.as_str(),
                "port_preserving": s.port_preserving,
                "port_prediction": s.port_prediction,
            },
            "extensions": s.extensions,
            "random_ports": {"open": s.random_ports, "peers_through_them": s.random_port_peers},
            "port_mapping": self.mapping.current().map(|m| {
                let mut j = m.json();
                j["embedded_in_address"] = s.mapped_inbound.into();
                j
            }),
            "mtu": s.mtu,
            "key_retired_by": s.key_retired.map(|a| a.to_string()),
            "peers": s.peers,
            "data_path": crate::runtime::report::data_path_json(self.kernel),
            "kernel_peers": self.client.kernel_peers(),
            "tun_offloads": self.out.tun.tun.offloads().to_string(),
            "counters": self.counters().json(),
        })
        .to_string()
    }

    /// The client's state and, once qualified, its address.
    fn service_status(&self) -> String {
        let s = self.client.status();
        match (s.state, s.address, s.server) {
            (ClientState::Resolving, _, _) => format!("resolving {}", self.names.describe()),
            (ClientState::Qualified, Some(a), Some(server)) => {
                format!("qualified: {a} (server {server}, NAT {})", s.nat.as_str())
            }
            (state, _, Some(server)) => format!("{} (server {server})", state.as_str()),
            (state, _, None) => state.as_str().to_string(),
        }
    }

    fn state_samples(&self) -> Vec<Sample> {
        let s = self.client.status();
        vec![
            Sample::gauge(
                "shipworm_client_qualified",
                "1 while the client holds a Teredo address.",
                u64::from(s.state == ClientState::Qualified),
            ),
            Sample::gauge("shipworm_client_nat", "The NAT kind as probed (the sample of value 1).", 1)
                .with("kind", s.nat.as_str()),
        ]
    }
}

#[cfg(test)]
mod counters_tests {
    use super::*;
    use crate::runtime::counters::tests::assert_views_agree;
    use shipworm_proto::DropReason;

    #[test]
    fn the_clients_metrics_status_and_log_line_list_the_same_counters() {
        let mut st = ClientStats {
            solicitations: 1,
            advertisements: 2,
            addresses: 3,
            sent: 4,
            delivered: 5,
            ..Default::default()
        };
        (st.sent_bytes, st.delivered_bytes, st.bubbles, st.echoes, st.first_contacts) = (6, 7, 8, 9, 10);
        (st.first_contact_delivered, st.silent_retests, st.peer_solicitations) = (11, 12, 13);
        (st.peer_advertisements, st.echo_tests, st.bubbles_withheld) = (14, 15, 26);
        st.drops.count(DropReason::QueueFull);
        let io = IoErrors { udp_send: 16, tun_write: 17, tun_read: 18, ..IoErrors::default() };
        let tun = TunOffloadCounts { super_packets_read: 19, joined_writes: 20 };
        let mut k = [0u64; shipworm_kernel_path::COUNTERS];
        (k[0], k[7]) = (23, 25);
        let t = counters(&st, 21, 22, &io, &tun, Some(&(k, 24)));
        assert_views_agree(&t);
        let j = t.json();
        assert_eq!((j["packets"]["to_peers"].as_u64(), j["silent_retests"].as_u64()), (Some(4 + 25), Some(12)));
        assert_eq!(j["packets"]["to_host"].as_u64(), Some(5 + 23), "the kernel's moved packets count");
        assert_eq!(j["dropped"]["queue_full"], 1);
        assert_eq!(
            (j["kernel_path_packets"]["decap"]["forwarded"].as_u64(), j["kernel_path_refused"].as_u64()),
            (Some(23), Some(24))
        );
    }
}
