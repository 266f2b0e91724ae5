//! How a daemon's counters read in its log (on SIGUSR1 and when it stops).

use shipworm_proto::DropCounters;

/// What the kernel refused to send: datagrams (no route, a full buffer…) and packets
/// written to the TUN (a full queue); and what the TUN handed over framed in a way we
/// could not take (never expected: a kernel bug or an offload we did not ask for).
/// Counted, never logged one by one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoErrors {
    /// UDP datagrams the kernel refused.
    pub udp_send: u64,
    /// IPv6 packets the TUN refused.
    pub tun_write: u64,
    /// TUN reads not understood (a super-packet or header we could not take).
    pub tun_read: u64,
}

impl IoErrors {
    /// Add another worker's.
    pub fn add(&mut self, o: &IoErrors) {
        self.udp_send += o.udp_send;
        self.tun_write += o.tun_write;
        self.tun_read += o.tun_read;
    }
}

impl std::fmt::Display for IoErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} UDP sends and {} TUN writes refused by the kernel, {} TUN reads not understood",
            self.udp_send, self.tun_write, self.tun_read
        )
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

impl std::fmt::Display for TunOffloadCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} TUN reads were super-packets, {} TUN writes joined rows",
            self.super_packets_read, self.joined_writes
        )
    }
}

/// "N dropped", and ": reason=n …" for each reason that counted.
pub fn dropped(d: &DropCounters) -> String {
    let reasons: Vec<String> = d.nonzero().map(|(r, n)| format!("{}={n}", r.as_str())).collect();
    if reasons.is_empty() {
        format!("{} dropped", d.total())
    } else {
        format!("{} dropped: {}", d.total(), reasons.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shipworm_proto::DropReason;

    #[test]
    fn io_errors_and_offload_counts_add_over_workers_and_read_in_the_log() {
        let mut io = IoErrors { udp_send: 1, tun_write: 2, tun_read: 3 };
        io.add(&IoErrors { udp_send: 10, tun_write: 20, tun_read: 30 });
        assert_eq!(io.to_string(), "11 UDP sends and 22 TUN writes refused by the kernel, 33 TUN reads not understood");
        let mut tun = TunOffloadCounts { super_packets_read: 4, joined_writes: 5 };
        tun.add(&TunOffloadCounts { super_packets_read: 40, joined_writes: 50 });
        assert_eq!(tun.to_string(), "44 TUN reads were super-packets, 55 TUN writes joined rows");
    }

    #[test]
    fn names_each_reason_that_counted() {
        let mut d = DropCounters::default();
        assert_eq!(dropped(&d), "0 dropped");
        d.count(DropReason::LoopGuard);
        d.count_n(DropReason::QueueFull, 2);
        assert_eq!(dropped(&d), "3 dropped: loop_guard=1 queue_full=2");
    }
}
