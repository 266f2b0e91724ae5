//! Bounded reads for the event loops: every role drains its sockets a batch at a time
//! and its TUN a packet at a time, but never without end, so a flood on one input
//! cannot hold a loop away from the others, its timers and the stop flag.

use crate::io::tun::Tun;
use crate::io::udp_batch::RecvBatch;
use crate::runtime::Failure;
use std::net::SocketAddrV4;

/// Read `batch` until it comes back short or `max_batches` calls were made, handing
/// each datagram to `f`. Returns the datagrams read.
pub fn udp(
    batch: &mut RecvBatch,
    max_batches: usize,
    mut f: impl FnMut(SocketAddrV4, &[u8]),
) -> Result<usize, Failure> {
    let mut total = 0;
    for _ in 0..max_batches {
        let n = batch.recv().map_err(|e| Failure::runtime(format!("receive: {e}")))?;
        for i in 0..n {
            let (from, data) = batch.get(i);
            f(from, data);
        }
        total += n;
        if n < batch.capacity() {
            break;
        }
    }
    Ok(total)
}

/// Read up to `max` packets from `tun` into `buf`, handing each to `f`. Returns the
/// packets read.
pub fn tun(tun: &Tun, buf: &mut [u8], max: usize, mut f: impl FnMut(&[u8])) -> Result<usize, Failure> {
    for k in 0..max {
        match tun.recv(buf) {
            Ok(Some(n)) => f(&buf[..n]),
            Ok(None) => return Ok(k),
            Err(e) => return Err(Failure::runtime(format!("read {}: {e}", tun.name()))),
        }
    }
    Ok(max)
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
}
