//! What the client's unprivileged half may ask of its interface helper, the one process
//! that keeps CAP_NET_ADMIN: one fixed-size request per datagram (a SOCK_SEQPACKET
//! socketpair), checked whole before anything is done, so that a subverted client can
//! at worst put a Teredo address on its own interface — never another address, another
//! interface, a route elsewhere, or a command.

use std::net::Ipv6Addr;

/// Every request is this long.
pub const REQUEST_LEN: usize = 24;
/// A reply's text is cut to this.
pub const REPLY_TEXT_MAX: usize = 200;

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Qualified: this address (replacing the one before, if any) with this MTU, the
    /// default route through the interface, and the hook run with STATE=up.
    Up {
        /// The Teredo address.
        address: Ipv6Addr,
        /// The link MTU.
        mtu: u32,
    },
    /// Connectivity lost: the address and route removed, the hook run with STATE=down.
    Down,
}

const UP: u8 = 1;
const DOWN: u8 = 2;

impl Request {
    /// The bytes on the socket.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        match *self {
            Request::Up { address, mtu } => {
                b[0] = UP;
                b[4..8].copy_from_slice(&mtu.to_be_bytes());
                b[8..24].copy_from_slice(&address.octets());
            }
            Request::Down => b[0] = DOWN,
        }
        b
    }

    /// A request read from the socket, if it is one the helper may carry out for a
    /// client under `prefix` (the configured Teredo /32).
    pub fn decode(bytes: &[u8], prefix: u32) -> Result<Request, String> {
        let b: &[u8; REQUEST_LEN] =
            bytes.try_into().map_err(|_| format!("a request of {} bytes (they are {REQUEST_LEN})", bytes.len()))?;
        if b[1..4] != [0, 0, 0] {
            return Err("reserved bytes set".into());
        }
        match b[0] {
            UP => {
                let mtu = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                if !(1280..=65535).contains(&mtu) {
                    return Err(format!("MTU {mtu} (1280 to 65535)"));
                }
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[8..24]);
                let address = Ipv6Addr::from(a);
                if u32::from_be_bytes([a[0], a[1], a[2], a[3]]) != prefix {
                    return Err(format!(
                        "{address} is not under the Teredo prefix {}/32",
                        Ipv6Addr::from((u128::from(prefix)) << 96)
                    ));
                }
                Ok(Request::Up { address, mtu })
            }
            DOWN if b[4..].iter().all(|&x| x == 0) => Ok(Request::Down),
            DOWN => Err("a down request with a payload".into()),
            k => Err(format!("unknown request kind {k}")),
        }
    }
}

/// The helper's answer: done, or why not.
pub fn encode_reply(result: &Result<(), String>) -> Vec<u8> {
    match result {
        Ok(()) => vec![0],
        Err(why) => {
            let mut text = why.as_bytes();
            if text.len() > REPLY_TEXT_MAX {
                let mut cut = REPLY_TEXT_MAX;
                while !why.is_char_boundary(cut) {
                    cut -= 1;
                }
                text = &text[..cut];
            }
            let mut v = vec![1];
            v.extend_from_slice(text);
            v
        }
    }
}

/// The answer read back.
pub fn decode_reply(bytes: &[u8]) -> Result<(), String> {
    match bytes.split_first() {
        Some((0, [])) => Ok(()),
        Some((1, text)) => Err(String::from_utf8_lossy(text).into_owned()),
        _ => Err(format!("the interface helper answered {} bytes that mean nothing", bytes.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEREDO: u32 = 0x2001_0000;

    #[test]
    fn what_the_client_asks_is_what_the_helper_reads() {
        let address: Ipv6Addr = "2001:0:c000:201:0:f227:3fff:fdea".parse().unwrap();
        for r in [Request::Up { address, mtu: 1280 }, Request::Up { address, mtu: 65535 }, Request::Down] {
            assert_eq!(Request::decode(&r.encode(), TEREDO), Ok(r));
        }
        assert_eq!(decode_reply(&encode_reply(&Ok(()))), Ok(()));
        assert_eq!(decode_reply(&encode_reply(&Err("no such device".into()))), Err("no such device".into()));
    }

    #[test]
    fn a_subverted_client_cannot_ask_for_another_address_mtu_or_anything_else() {
        let up = |a: &str, mtu| Request::Up { address: a.parse().unwrap(), mtu }.encode();
        // Another prefix: a native address, a ULA, the Teredo prefix of another relay.
        for a in ["2001:db8::1", "fd00::1", "::1", "3ffe:831f::1"] {
            let e = Request::decode(&up(a, 1280), TEREDO).unwrap_err();
            assert!(e.contains("not under the Teredo prefix 2001::/32"), "{a}: {e}");
        }
        for mtu in [0, 1279, 65536, u32::MAX] {
            assert!(Request::decode(&up("2001::1", mtu), TEREDO).is_err(), "MTU {mtu}");
        }
        let good = up("2001::1", 1400);
        assert!(Request::decode(&good[..23], TEREDO).is_err(), "short");
        assert!(Request::decode(&[&good[..], &[0]].concat(), TEREDO).is_err(), "long");
        assert!(Request::decode(&[], TEREDO).is_err(), "empty");
        for kind in [0u8, 3, 255] {
            let mut b = good;
            b[0] = kind;
            assert!(Request::decode(&b, TEREDO).is_err(), "kind {kind}");
        }
        let mut b = good;
        b[2] = 1;
        assert!(Request::decode(&b, TEREDO).is_err(), "reserved");
        let mut down = Request::Down.encode();
        down[10] = 7;
        assert!(Request::decode(&down, TEREDO).is_err(), "down with a payload");
        // A configured prefix is the only one.
        assert!(Request::decode(&up("3ffe:831f::1", 1280), 0x3ffe_831f).is_ok());
        assert!(Request::decode(&up("2001::1", 1280), 0x3ffe_831f).is_err());
    }

    #[test]
    fn a_long_failure_is_cut_on_a_character_boundary() {
        let why = "é".repeat(150);
        let r = encode_reply(&Err(why));
        assert!(r.len() <= 1 + REPLY_TEXT_MAX);
        assert!(decode_reply(&r).unwrap_err().chars().all(|c| c == 'é'));
    }
}
