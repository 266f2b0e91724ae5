//! Secure qualification (RFC 4380 §5.2.2): the client names itself in the
//! authentication header and both sides sign their RS/RA with HMAC-SHA1 under a shared
//! secret. The MAC covers the nonce, the confirmation byte, and everything after the
//! authentication header (origin indication, if any, and the IPv6 packet). (§7.2.1
//! mentions MD5; §5.2.2's SHA-1 is the one implemented.)

use hmac::{Hmac, Mac};
use sha1::Sha1;
use shipworm_wire::teredo_auth::AuthHeader;

/// Length of an HMAC-SHA1 authentication value.
pub const MAC_LEN: usize = 20;

/// A client's identity and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Client identifier (1 to 255 bytes).
    pub client_id: Vec<u8>,
    /// Shared secret.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        write!(
            f,
            "Credentials {{ client_id: {:?}, secret: <{} bytes> }}",
            String::from_utf8_lossy(&self.client_id),
            self.secret.len()
        )
    }
}

/// The MAC of a message: `nonce | confirmation | rest`.
pub fn mac(secret: &[u8], nonce: &[u8; 8], confirmation: u8, rest: &[u8]) -> [u8; MAC_LEN] {
    let mut m = <Hmac<Sha1> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(nonce);
    m.update(&[confirmation]);
    m.update(rest);
    m.finalize().into_bytes().into()
}

/// Whether `datagram`, which starts with authentication header `auth`, carries a valid
/// MAC under `secret` (compared in constant time).
pub fn verify(secret: &[u8], auth: &AuthHeader<&[u8]>, datagram: &[u8]) -> bool {
    if auth.auth_value().len() != MAC_LEN {
        return false;
    }
    let Some(rest) = datagram.get(auth.header_len()..) else { return false };
    let mut m = <Hmac<Sha1> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(&auth.nonce());
    m.update(&[auth.confirmation()]);
    m.update(rest);
    m.verify_slice(auth.auth_value()).is_ok()
}

/// Fill in the MAC of a message already built in `datagram` whose authentication
/// header (with a zeroed authentication value of [`MAC_LEN`] bytes) comes first.
pub fn sign(secret: &[u8], datagram: &mut [u8]) {
    let Ok(h) = AuthHeader::new_checked(&datagram[..]) else { return };
    if h.au_len() != MAC_LEN {
        return;
    }
    let (hl, nonce, conf) = (h.header_len(), h.nonce(), h.confirmation());
    let tag = mac(secret, &nonce, conf, &datagram[hl..]);
    // Checked just above, and the lengths the view read are unchanged.
    AuthHeader::new_unchecked(&mut datagram[..]).auth_value_mut().copy_from_slice(&tag);
}

#[cfg(test)]
mod tests {
    use super::*;
    use shipworm_wire::teredo_auth::AuthRepr;

    #[test]
    fn sign_then_verify_and_tamper() {
        let mut d = vec![0u8; 64];
        let n = AuthRepr { client_id: b"alice", auth_value: &[0; MAC_LEN], nonce: [7; 8], confirmation: 0 }
            .emit(&mut d)
            .unwrap();
        d[n..].copy_from_slice(&[0x60; 64 - 38]);
        sign(b"secret", &mut d);
        let h = AuthHeader::new_checked(&d[..]).unwrap();
        assert!(verify(b"secret", &h, &d));
        assert!(!verify(b"other", &h, &d));
        let mut t = d.clone();
        t[50] ^= 1;
        assert!(!verify(b"secret", &AuthHeader::new_checked(&t[..]).unwrap(), &t));
    }

    #[test]
    fn rfc2202_hmac_sha1_vector() {
        // RFC 2202 test case 2 ("Jefe"), fed through the same primitive.
        let mut m = <Hmac<Sha1> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let t: [u8; 20] = m.finalize().into_bytes().into();
        assert_eq!(t[..4], [0xef, 0xfc, 0xdf, 0x6a]);
    }
}
