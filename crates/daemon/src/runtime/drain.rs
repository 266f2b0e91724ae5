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

/// As [`udp`], with `ahead` shown every datagram of a batch before `f` sees any: a
/// relay starts fetching the batch's peer entries, so that their memory waits overlap.
pub fn udp_ahead(
    batch: &mut RecvBatch,
    max_batches: usize,
    mut ahead: impl FnMut(&[u8]),
    mut f: impl FnMut(SocketAddrV4, &[u8]),
) -> Result<usize, Failure> {
    let mut total = 0;
    for _ in 0..max_batches {
        let n = batch.recv().map_err(|e| Failure::runtime(format!("receive: {e}")))?;
        (0..n).flat_map(|i| batch.datagrams(i)).for_each(&mut ahead);
        for i in 0..n {
            let (from, _) = batch.get(i);
            for data in batch.datagrams(i) {
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
    fn a_batch_is_shown_ahead_before_any_of_it_is_handled() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..12u8 {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new(rx, 8, 64);
        let log = std::cell::RefCell::new(Vec::new());
        let n = udp_ahead(
            &mut batch,
            10,
            |d| log.borrow_mut().push(('a', d[0])),
            |_, d| log.borrow_mut().push(('f', d[0])),
        )
        .unwrap();
        assert_eq!(n, 12);
        let ahead = |r: std::ops::Range<u8>| r.map(|i| ('a', i)).collect::<Vec<_>>();
        let handled = |r: std::ops::Range<u8>| r.map(|i| ('f', i)).collect::<Vec<_>>();
        let want = [ahead(0..8), handled(0..8), ahead(8..12), handled(8..12)].concat();
        assert_eq!(log.into_inner(), want);
    }
}
