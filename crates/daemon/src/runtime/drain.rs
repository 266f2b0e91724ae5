//! Bounded reads for the event loops: every role drains its sockets and its TUN a batch
//! at a time, but never without end, so a flood on one input
//! cannot hold a loop away from the others, its timers and the stop flag.

use crate::io::tun::Tun;
use crate::io::tun_batch::TunReader;
use crate::io::udp_batch::RecvBatch;
use crate::runtime::Failure;
use std::net::SocketAddrV4;

/// Read `batch` until it comes back short or `max_batches` calls were made, handing
/// each datagram to `f` (a coalesced row's one by one). Returns the datagrams read.
pub fn udp(batch: &mut RecvBatch, max_batches: usize, f: impl FnMut(SocketAddrV4, &[u8])) -> Result<usize, Failure> {
    udp_ahead(batch, max_batches, |_| {}, f)
}

/// How far ahead of `f` [`udp_ahead`] shows datagrams: enough fetches in flight to
/// overlap their waits, few enough that the first fetched are still cached when used
/// (a whole batch of 64 ahead did worse, in the peer-table bench, than 16).
pub const AHEAD: usize = 16;

/// As [`udp`], with `ahead` shown each datagram [`AHEAD`] datagrams before `f` sees it:
/// a relay starts fetching the batch's peer entries, so that their memory waits overlap.
pub fn udp_ahead(
    batch: &mut RecvBatch,
    max_batches: usize,
    mut ahead: impl FnMut(&[u8]),
    mut f: impl FnMut(SocketAddrV4, &[u8]),
) -> Result<usize, Failure> {
    let mut total = 0;
    for _ in 0..max_batches {
        let n = batch.recv().map_err(|e| Failure::runtime(format!("receive: {e}")))?;
        let mut coming = (0..n).flat_map(|i| batch.datagrams(i));
        coming.by_ref().take(AHEAD).for_each(&mut ahead);
        for i in 0..n {
            let (from, _) = batch.get(i);
            for data in batch.datagrams(i) {
                if let Some(next) = coming.next() {
                    ahead(next);
                }
                f(from, data);
                total += 1;
            }
        }
        if n < batch.capacity() {
            break;
        }
    }
    Ok(total)
}

/// Read `tun` until about `max` packets (a super-packet's segments all count) were
/// handed to `f`, or it is empty. Returns the packets read.
pub fn tun(tun: &Tun, reader: &mut TunReader, max: usize, f: impl FnMut(&[u8])) -> Result<usize, Failure> {
    reader.drain(tun, max, f).map_err(|e| Failure::runtime(format!("read {}: {e}", tun.name())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_flood_is_read_a_bounded_number_of_batches_at_a_time() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..40u8 {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new(rx, 8, 64);
        let mut seen = Vec::new();
        assert_eq!(udp(&mut batch, 2, |_, d| seen.push(d[0])).unwrap(), 16, "two batches of eight, no more");
        assert_eq!(udp(&mut batch, 100, |_, d| seen.push(d[0])).unwrap(), 24, "the rest, then a short batch ends it");
        assert_eq!(seen, (0..40).collect::<Vec<u8>>());
    }

    #[test]
    fn each_datagram_is_shown_ahead_a_fixed_distance_before_it_is_handled() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent = (AHEAD + 12) as u8;
        for i in 0..sent {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new(rx, 64, 64);
        let log = std::cell::RefCell::new(Vec::new());
        let n = udp_ahead(
            &mut batch,
            10,
            |d| log.borrow_mut().push(('a', d[0])),
            |_, d| log.borrow_mut().push(('f', d[0])),
        )
        .unwrap();
        assert_eq!(n, usize::from(sent));
        let log = log.into_inner();
        for i in 0..sent {
            let shown = log.iter().position(|&e| e == ('a', i)).expect("every datagram shown ahead");
            let handled = log.iter().position(|&e| e == ('f', i)).expect("and handled");
            let between = log[shown..handled].iter().filter(|e| e.0 == 'f').count();
            // Shown AHEAD handlings before its own (fewer for the first ones).
            assert_eq!(between, usize::from(i).min(AHEAD), "datagram {i}");
        }
    }
}
