//! What the daemon's own I/O counts beside the state machines' counters (the roles'
//! tables in `runtime::counters` list them), and what a kernel data path reports.

use crate::runtime::counters::Counters;
use shipworm::io::kernel_path::KernelDataPath;

/// What the kernel refused to send: datagrams (no route, a full buffer…) and packets
/// written to the TUN (a full queue); and what the TUN handed over framed in a way we
/// could not take (never expected: a kernel bug or an offload we did not ask for).
/// Counted, never logged one by one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoErrors {
    /// UDP datagrams the kernel refused.
    pub udp_send: u64,
    /// IPv6 packets the server's raw socket could not send (the server has no TUN).
    pub raw_send: u64,
    /// Packets the raw socket's holder refused as not connectivity-test echoes: zero
    /// unless the server is wrong or subverted.
    pub raw_refused: u64,
    /// IPv6 packets the TUN refused.
    pub tun_write: u64,
    /// TUN reads not understood (a super-packet or header we could not take).
    pub tun_read: u64,
}

impl IoErrors {
    /// Add another worker's.
    pub fn add(&mut self, o: &IoErrors) {
        self.udp_send += o.udp_send;
        self.raw_send += o.raw_send;
        self.raw_refused += o.raw_refused;
        self.tun_write += o.tun_write;
        self.tun_read += o.tun_read;
    }
}

/// What the TUN offloads did: reads that were super-packets (each cut into its
/// segments), and writes that carried a joined row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TunOffloadCounts {
    /// TUN reads that carried a super-packet.
    pub super_packets_read: u64,
    /// TUN writes that carried a joined row.
    pub joined_writes: u64,
}

impl TunOffloadCounts {
    /// Add another worker's.
    pub fn add(&mut self, o: &TunOffloadCounts) {
        self.super_packets_read += o.super_packets_read;
        self.joined_writes += o.joined_writes;
    }
}

/// The kernel data path's rows in a daemon's counters: what became of each Teredo
/// packet its programs looked at (what they moved: outcome "forwarded"; the relay also
/// counts it in its packets and bytes, worker "kernel"), and the peer-list updates its
/// map refused.
pub(crate) fn kernel_rows(t: &mut Counters, counts: &[u64; shipworm_kernel_path::COUNTERS], refused: u64) {
    const PACKETS: &str = "Teredo packets the kernel data path looked at, by direction and outcome \
                           (forwarded: moved in the kernel; any other: left to the daemon, and why).";
    for ((direction, outcome), &n) in
        shipworm_kernel_path::Counter::ALL.into_iter().map(shipworm_kernel_path::Counter::labels).zip(counts)
    {
        if outcome != "bytes" {
            t.counter("kernel_path_packets", PACKETS, n).label("direction", direction).label("outcome", outcome);
        }
    }
    t.counter("kernel_path_refused", "Peer-list updates the kernel refused (its map full).", refused);
}

/// The status document's `data_path` object.
pub(crate) fn data_path_json(kernel: Option<&KernelDataPath>) -> serde_json::Value {
    match kernel {
        Some(k) => {
            let mut d = serde_json::json!({
                "kind": "kernel",
                "decap": k.decap_name(),
                "forward": k.forward_name(),
                "interfaces": k.interfaces,
                "programs": k.programs,
                // False once the daemon turned them off (it could no longer keep their
                // peer map to what it trusts): every packet goes through it.
                "on": k.switch().is_on(),
            });
            // A direct relay's: which route verdicts its programs keep now.
            if k.direct {
                d["route_verdicts"] = k.switch().kept_route_verdicts().name().into();
            }
            if k.relay {
                d["mapping_route_verdicts"] = k.switch().keeps_mapping_verdicts().into();
            }
            d
        }
        None => serde_json::json!({ "kind": "user" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_and_offload_counts_add_over_workers() {
        let mut io = IoErrors { udp_send: 1, tun_write: 2, tun_read: 3, ..Default::default() };
        io.add(&IoErrors { udp_send: 10, tun_write: 20, tun_read: 30, ..Default::default() });
        assert_eq!((io.udp_send, io.tun_write, io.tun_read), (11, 22, 33));
        let mut tun = TunOffloadCounts { super_packets_read: 4, joined_writes: 5 };
        tun.add(&TunOffloadCounts { super_packets_read: 40, joined_writes: 50 });
        assert_eq!((tun.super_packets_read, tun.joined_writes), (44, 55));
    }
}
