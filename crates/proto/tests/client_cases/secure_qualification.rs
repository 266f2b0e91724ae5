use super::*;
use shipworm_proto::secure::Credentials;

fn creds(id: &str, secret: &str) -> Credentials {
    Credentials { client_id: id.as_bytes().to_vec(), secret: secret.as_bytes().to_vec() }
}

fn secure_server() -> Server {
    let mut cfg = ServerConfig::new(P);
    cfg.clients = vec![creds("alice", "correct horse"), creds("bob", "battery staple")];
    Server::new(cfg)
}

fn secure_client(c: Option<Credentials>) -> Client<Rng> {
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    cfg.credentials = c;
    Client::new(cfg, Rng(42))
}

fn exchange(server: &mut Server, client: &mut Client<Rng>) -> Option<Vec<u8>> {
    let mut w = Recorder::default();
    client.on_timer(secs(1), &mut w);
    let (_, rs) = w.pop_udp()?;
    let mut answer = Recorder::default();
    let _ = server.on_udp(secs(1), Local::Primary, sa(M), &rs, &mut answer);
    answer.pop_udp().map(|(_, ra)| ra)
}

#[test]
fn signed_rs_gets_a_signed_ra_that_qualifies() {
    let mut s = secure_server();
    let mut c = secure_client(Some(creds("alice", "correct horse")));
    let ra = exchange(&mut s, &mut c).expect("RA for a known client with the right secret");
    let p = TeredoPacket::parse(&ra).unwrap();
    assert_eq!(p.auth.unwrap().client_id(), b"alice");
    assert_eq!(p.auth.unwrap().auth_value().len(), 20);
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(P, 3544), &ra, &mut w);
    assert_eq!(w.udp().len(), 1, "accepted: on to the secondary probe");
    // The same RA with one bit changed is refused.
    let mut c = secure_client(Some(creds("alice", "correct horse")));
    let mut ra = exchange(&mut s, &mut c).unwrap();
    let n = ra.len();
    ra[n - 1] ^= 1;
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(P, 3544), &ra, &mut w);
    assert!(w.udp().is_empty(), "tampered RA refused");
}

#[test]
fn wrong_secret_or_no_auth_get_nothing() {
    let mut s = secure_server();
    assert!(exchange(&mut s, &mut secure_client(Some(creds("alice", "wrong")))).is_none());
    assert!(exchange(&mut s, &mut secure_client(None)).is_none());
    assert_eq!(s.stats().drops.get(shipworm_proto::DropReason::AuthenticationFailed), 2);
}

#[test]
fn an_unknown_client_identifier_is_told_so_and_does_not_qualify() {
    // RFC 4380 §5.3.2: the confirmation byte is not zero when the identifier is not valid.
    let mut s = secure_server();
    let mut c = secure_client(Some(creds("mallory", "correct horse")));
    let ra = exchange(&mut s, &mut c).expect("an answer saying the identifier is not valid");
    let auth = TeredoPacket::parse(&ra).unwrap().auth_repr().unwrap();
    assert_eq!((auth.client_id, auth.confirmation), (&b"mallory"[..], 1));
    assert_eq!(auth.auth_value, &[0u8; 20][..], "no secret to sign with");
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(P, 3544), &ra, &mut w);
    assert!(w.udp().is_empty(), "refused: the client does not go on to the secondary probe");
    assert_eq!(c.address(), None);
}

#[test]
fn unsigned_ra_is_refused_by_a_secure_client() {
    // A server without secure qualification answers, but the client wants a MAC.
    let mut plain = Server::new(ServerConfig::new(P));
    let mut c = secure_client(Some(creds("alice", "correct horse")));
    let ra = exchange(&mut plain, &mut c);
    // The plain server echoes the nonce but signs nothing.
    if let Some(ra) = ra {
        let mut w = Recorder::default();
        let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(P, 3544), &ra, &mut w);
        assert!(w.udp().is_empty());
    }
}
