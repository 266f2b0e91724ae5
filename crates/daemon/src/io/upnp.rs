//! UPnP IGD port mapping (AddPortMapping, DeletePortMapping, GetExternalIPAddress),
//! with every input bounded. Whoever is on the LAN can answer a search, so:
//!
//! * SSDP answers are taken only from the default gateway's address, and read from one
//!   datagram; the description's URL must name that same address.
//! * Every HTTP exchange has one deadline for the whole of it, and a cap on what is read
//!   (a description is a few kilobytes; 64 KiB is far more than any gateway's).
//! * XML is read by a streaming parser with a bound on nesting: no tree is built, and a
//!   document nested a hundred thousand deep is refused, not recursed into.
//!
//! A hand-written client, not a library's: the maintained ones (`igd-next`) read the
//! whole body of any responder and parse it into a tree recursively.

use shipworm_side_wire::http_answer::{http_url, is_complete, is_request_path, parse_http, ssdp_location};
use shipworm_side_wire::upnp_description::{control_url, element_text};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// The SSDP multicast group and port.
const SSDP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 255, 250), 1900);
/// Most bytes read from an HTTP answer, headers and body.
pub const HTTP_MAX: usize = 64 * 1024;
/// One HTTP exchange, all of it.
const HTTP_WITHIN: Duration = Duration::from_secs(3);

/// A gateway's port-mapping service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Igd {
    /// Its HTTP endpoint (the default gateway's address).
    pub http: SocketAddrV4,
    /// The control URL's path.
    pub control: String,
    /// The service type it answered for.
    pub service: String,
}

/// Why AddPortMapping failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddError {
    /// UPnP error 725: the gateway takes permanent leases only (IGDv1).
    OnlyPermanentLeases,
    /// Anything else, said.
    Other(String),
}

/// How many times a search goes out within its window. SSDP is UDP: one lost datagram,
/// or a gateway whose SSDP socket is not open yet (a search to it is lost without a
/// word), would otherwise cost the whole search (the UPnP Device Architecture asks
/// control points to search more than once).
const SEARCHES: u32 = 3;

/// Search from `internal` for the IGD at `gateway`, for at most `within`.
pub fn discover(internal: Ipv4Addr, gateway: Ipv4Addr, within: Duration) -> Result<Igd, String> {
    search(internal, gateway, SSDP, within)
}

/// Search `to` (the SSDP group, or in tests a fake gateway's socket).
fn search(internal: Ipv4Addr, gateway: Ipv4Addr, to: SocketAddrV4, within: Duration) -> Result<Igd, String> {
    let start = Instant::now();
    let deadline = start + within;
    let sock = UdpSocket::bind((internal, 0)).map_err(|e| format!("SSDP socket: {e}"))?;
    let request = "M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 1\r\n\
                  ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\r\n";
    let mut buf = [0u8; 2048];
    let mut refused = None;
    let mut led_nowhere: Option<String> = None;
    let mut sent = 0;
    loop {
        // The searches go out over the window's first half: the last one leaves the
        // gateway half the window to answer (it may wait up to MX, 1 s, first).
        let next_search = (sent < SEARCHES).then(|| start + within / 2 * sent / (SEARCHES - 1));
        let now = Instant::now();
        // Not after the window (an answer that led nowhere may have taken long).
        if next_search.is_some_and(|at| at <= now) && (now < deadline || sent == 0) {
            sock.send_to(request.as_bytes(), to).map_err(|e| format!("SSDP search: {e}"))?;
            sent += 1;
            continue;
        }
        if now >= deadline {
            break;
        }
        let wake = next_search.map_or(deadline, |at| at.min(deadline));
        sock.set_read_timeout(Some((wake - now).max(Duration::from_millis(1)))).map_err(|e| e.to_string())?;
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            // The window's end or the next search's time, or a signal: neither ends
            // the search.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                continue
            }
            Err(e) => return Err(format!("SSDP: {e}")),
        };
        // Only the default gateway's word counts, and it is not even read otherwise.
        if from.ip() != std::net::IpAddr::V4(gateway) {
            refused = Some(format!("{from} answered the search, not the default gateway {gateway}"));
            continue;
        }
        let Some(location) = ssdp_location(&buf[..n]) else {
            refused = Some("an SSDP answer without a LOCATION".into());
            continue;
        };
        // A gateway may answer several times (one per device or service, and once per
        // search): an answer that leads nowhere does not end the search, and the same
        // description is not fetched again.
        if led_nowhere.as_deref() == Some(location.as_str()) {
            continue;
        }
        match igd_at(&location, gateway) {
            Ok(igd) => return Ok(igd),
            Err(e) => {
                refused = Some(e);
                led_nowhere = Some(location);
            }
        }
    }
    Err(refused.unwrap_or_else(|| format!("no UPnP gateway answered {sent} searches within {within:?}")))
}

/// The port-mapping service the description at `location` (an SSDP answer of the
/// gateway's names it) leads to.
fn igd_at(location: &str, gateway: Ipv4Addr) -> Result<Igd, String> {
    let (http, path) = http_url(location, gateway)?;
    let description =
        http_exchange(http, &format!("GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"))?;
    let (control, service) = control_url(&description.1)?;
    let control = match http_url(&control, gateway) {
        Ok((at, path)) if at == http => path,
        Ok((at, _)) => return Err(format!("the control URL names {at}, not {http}")),
        Err(_) if control.starts_with('/') => control,
        Err(_) => format!("/{control}"),
    };
    if !is_request_path(&control) {
        return Err(format!("an unusable control URL: {control:.80}"));
    }
    Ok(Igd { http, control, service })
}

/// Send `request` to `to` and read the answer: (status code, body). One deadline for
/// it all, and at most [`HTTP_MAX`] bytes read.
fn http_exchange(to: SocketAddrV4, request: &str) -> Result<(u16, String), String> {
    let deadline = Instant::now() + HTTP_WITHIN;
    let mut conn = TcpStream::connect_timeout(&SocketAddr::V4(to), HTTP_WITHIN).map_err(|e| format!("{to}: {e}"))?;
    conn.set_write_timeout(Some(HTTP_WITHIN)).map_err(|e| e.to_string())?;
    conn.write_all(request.as_bytes()).map_err(|e| format!("{to}: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
        let left = left.ok_or_else(|| format!("{to} did not answer within {HTTP_WITHIN:?}"))?;
        conn.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if got.len() + n > HTTP_MAX => return Err(format!("{to}: an answer of more than {HTTP_MAX} bytes")),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{to}: {e}")),
        }
        // A gateway that keeps the connection open despite "Connection: close" has
        // said all once its body is complete.
        if is_complete(&got) {
            break;
        }
    }
    parse_http(&got).map_err(|e| format!("{to}: {e}"))
}

impl Igd {
    /// Call `action` with `args`; the answer's body, or the UPnP error code and text.
    fn soap(&self, action: &str, args: &[(&str, String)]) -> Result<String, (Option<u16>, String)> {
        let args: String = args.iter().map(|(n, v)| format!("<{n}>{v}</{n}>")).collect();
        let body = format!(
            "<?xml version=\"1.0\"?>\r\n<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\" \
             s:encodingStyle=\"http://schemas.xmlsoap.org/soap/encoding/\"><s:Body>\
             <u:{action} xmlns:u=\"{service}\">{args}</u:{action}></s:Body></s:Envelope>",
            service = self.service
        );
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {http}\r\nContent-Type: text/xml; charset=\"utf-8\"\r\n\
             SOAPAction: \"{service}#{action}\"\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}",
            path = self.control,
            http = self.http,
            service = self.service,
            len = body.len()
        );
        let (code, answer) = http_exchange(self.http, &request).map_err(|e| (None, e))?;
        if code == 200 {
            return Ok(answer);
        }
        let error = element_text(&answer, "errorCode").ok().flatten().and_then(|c| c.trim().parse().ok());
        let text = element_text(&answer, "errorDescription").ok().flatten().unwrap_or_default();
        Err((error, format!("{action}: HTTP {code}, UPnP error {error:?} {text:.80}")))
    }

    /// Map UDP `external_port` to `internal` for `lease` seconds (0: until deleted).
    pub fn add_port(
        &self,
        external_port: u16,
        internal: SocketAddrV4,
        lease: u32,
        description: &str,
    ) -> Result<(), AddError> {
        let args = [
            ("NewRemoteHost", String::new()),
            ("NewExternalPort", external_port.to_string()),
            ("NewProtocol", "UDP".into()),
            ("NewInternalPort", internal.port().to_string()),
            ("NewInternalClient", internal.ip().to_string()),
            ("NewEnabled", "1".into()),
            ("NewPortMappingDescription", description.into()),
            ("NewLeaseDuration", lease.to_string()),
        ];
        match self.soap("AddPortMapping", &args) {
            Ok(_) => Ok(()),
            Err((Some(725), _)) => Err(AddError::OnlyPermanentLeases),
            Err((_, e)) => Err(AddError::Other(e)),
        }
    }

    /// Delete the UDP mapping of `external_port`.
    pub fn remove_port(&self, external_port: u16) -> Result<(), String> {
        let args = [
            ("NewRemoteHost", String::new()),
            ("NewExternalPort", external_port.to_string()),
            ("NewProtocol", "UDP".into()),
        ];
        self.soap("DeletePortMapping", &args).map(drop).map_err(|(_, e)| e)
    }

    /// The gateway's external IPv4 address.
    pub fn external_ip(&self) -> Result<Ipv4Addr, String> {
        let answer = self.soap("GetExternalIPAddress", &[]).map_err(|(_, e)| e)?;
        let text = element_text(&answer, "NewExternalIPAddress")?.ok_or("no NewExternalIPAddress in the answer")?;
        text.trim().parse().map_err(|_| format!("the external address is not IPv4: {text:.40}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const DESCRIPTION: &str = r#"<?xml version="1.0"?>
<root xmlns="urn:schemas-upnp-org:device-1-0"><device><deviceType>urn:schemas-upnp-org:device:InternetGatewayDevice:1</deviceType>
<serviceList><service><serviceType>urn:schemas-upnp-org:service:Layer3Forwarding:1</serviceType><controlURL>/ctl/L3F</controlURL></service></serviceList>
<deviceList><device><deviceList><device><serviceList><service>
<serviceType>urn:schemas-upnp-org:service:WANIPConnection:1</serviceType><serviceId>urn:upnp-org:serviceId:WANIPConn1</serviceId>
<controlURL>/ctl/IPConn</controlURL><eventSubURL>/evt/IPConn</eventSubURL></service></serviceList></device></deviceList></device></deviceList></device></root>"#;

    #[test]
    fn a_gateways_description_names_its_port_mapping_service() {
        let (control, kind) = control_url(DESCRIPTION).unwrap();
        assert_eq!(
            (control.as_str(), kind.as_str()),
            ("/ctl/IPConn", "urn:schemas-upnp-org:service:WANIPConnection:1")
        );
        let answer = "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body>\
                      <u:GetExternalIPAddressResponse xmlns:u=\"urn:schemas-upnp-org:service:WANIPConnection:1\">\
                      <NewExternalIPAddress>192.0.2.21</NewExternalIPAddress></u:GetExternalIPAddressResponse></s:Body></s:Envelope>";
        assert_eq!(element_text(answer, "NewExternalIPAddress").unwrap().as_deref(), Some("192.0.2.21"));
    }

    #[test]
    fn ssdp_answers_and_urls_are_taken_only_for_the_gateway() {
        let gw = Ipv4Addr::new(10, 1, 0, 1);
        let answer = b"HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nLocation: http://10.1.0.1:5000/rootDesc.xml\r\nST: x\r\n\r\n";
        let at = ssdp_location(answer).unwrap();
        assert_eq!(http_url(&at, gw).unwrap(), (SocketAddrV4::new(gw, 5000), "/rootDesc.xml".into()));
        assert!(http_url("http://10.1.0.66:5000/rootDesc.xml", gw).is_err(), "another host");
        assert!(http_url("https://10.1.0.1/x", gw).is_err());
        assert!(http_url("http://10.1.0.1:99999/x", gw).is_err());
        assert!(ssdp_location(b"NOTIFY * HTTP/1.1\r\nLocation: http://10.1.0.1/\r\n\r\n").is_none());
    }

    #[test]
    fn http_answers_are_read_whole_or_chunked_and_refused_when_broken() {
        let (code, body) = parse_http(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((code, body.as_str()), (200, "hello"));
        let chunked = b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_http(chunked).unwrap(), (500, "abcde".into()));
        for bad in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            assert!(parse_http(bad).is_err());
        }
    }

    /// #40, 3: a description nested 100 000 deep is refused, not recursed into (a tree
    /// builder overflowed the stack with it and took the client down).
    #[test]
    fn a_description_nested_100_000_deep_is_refused_without_a_crash() {
        let deep = format!("{}{}", "<a>".repeat(100_000), "</a>".repeat(100_000));
        let e = control_url(&deep).unwrap_err();
        assert!(e.contains("nested more than"), "{e}");
        // On a thread with a small stack, as the mapping thread has.
        let t = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || control_url(&deep).is_err());
        assert!(t.unwrap().join().unwrap());
    }

    /// A fake gateway's HTTP server that answers once with `answer`, dribbled if asked,
    /// and keeps the connection open for `linger` after.
    fn fake_http(answer: Vec<u8>, dribble: bool, linger: Duration) -> SocketAddrV4 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(at) = l.local_addr().unwrap() else { unreachable!() };
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            if dribble {
                for b in answer {
                    if c.write_all(&[b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            } else {
                let _ = c.write_all(&answer);
            }
            std::thread::sleep(linger);
        });
        at
    }

    /// A search is sent more than once, within its window: two searches lost (a
    /// gateway whose SSDP socket was not open yet loses them without a word) and the
    /// third still finds it.
    #[test]
    fn searches_lost_are_sent_again_within_the_window() {
        let http = fake_http(
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{DESCRIPTION}", DESCRIPTION.len()).into_bytes(),
            false,
            Duration::ZERO,
        );
        let ssdp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(to) = ssdp.local_addr().unwrap() else { unreachable!() };
        let gateway = std::thread::spawn(move || {
            ssdp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut buf = [0u8; 1024];
            let mut heard = 0;
            while let Ok((n, from)) = ssdp.recv_from(&mut buf) {
                assert!(buf[..n].starts_with(b"M-SEARCH * HTTP/1.1"));
                heard += 1;
                if heard == 3 {
                    let answer = format!("HTTP/1.1 200 OK\r\nST: x\r\nLOCATION: http://{http}/rootDesc.xml\r\n\r\n");
                    ssdp.send_to(answer.as_bytes(), from).unwrap();
                    break;
                }
            }
            heard
        });
        let igd = search(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, to, Duration::from_secs(2)).unwrap();
        assert_eq!((igd.http, igd.control.as_str()), (http, "/ctl/IPConn"));
        assert_eq!(gateway.join().unwrap(), 3, "searches the gateway heard");
        // A gateway that never answers: the search ends with its window, and says so.
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(to) = silent.local_addr().unwrap() else { unreachable!() };
        let t = Instant::now();
        let e = search(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, to, Duration::from_millis(600)).unwrap_err();
        assert!(e.contains("answered 3 searches"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // Even a window of nothing sends a search, and only one.
        let e = search(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, to, Duration::ZERO).unwrap_err();
        assert!(e.contains("answered 1 searches"), "{e}");
    }

    /// A gateway answering each search with a description that leads nowhere has that
    /// description fetched once, not once per answer.
    #[test]
    fn a_description_that_led_nowhere_is_not_fetched_again() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(http) = l.local_addr().unwrap() else { unreachable!() };
        l.set_nonblocking(true).unwrap();
        let fetches = std::thread::spawn(move || {
            let body = "<root><device><serviceList></serviceList></device></root>";
            let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
            let (mut fetches, until) = (0, Instant::now() + Duration::from_secs(3));
            while Instant::now() < until {
                match l.accept() {
                    Ok((mut c, _)) => {
                        fetches += 1;
                        c.set_nonblocking(false).unwrap();
                        let _ = c.read(&mut [0u8; 1024]);
                        let _ = c.write_all(answer.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            fetches
        });
        let ssdp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(to) = ssdp.local_addr().unwrap() else { unreachable!() };
        std::thread::spawn(move || {
            ssdp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut buf = [0u8; 1024];
            while let Ok((_, from)) = ssdp.recv_from(&mut buf) {
                let answer = format!("HTTP/1.1 200 OK\r\nST: x\r\nLOCATION: http://{http}/rootDesc.xml\r\n\r\n");
                let _ = ssdp.send_to(answer.as_bytes(), from);
            }
        });
        let e = search(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, to, Duration::from_secs(2)).unwrap_err();
        assert!(!e.contains("no UPnP gateway answered"), "the gateway's answers were read: {e}");
        assert_eq!(fetches.join().unwrap(), 1, "fetches of the one description");
    }

    /// A gateway that keeps the connection open after a complete answer (despite
    /// "Connection: close") is not waited for.
    #[test]
    fn a_complete_answer_on_a_connection_left_open_is_taken_at_once() {
        let at =
            fake_http(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec(), false, Duration::from_secs(5));
        let t = Instant::now();
        assert_eq!(http_exchange(at, "GET / HTTP/1.1\r\n\r\n").unwrap(), (200, "hello".into()));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(is_complete(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"));
        assert!(!is_complete(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello"));
        assert!(
            http_url("http://10.1.0.1/ctl\r\nX: y", Ipv4Addr::new(10, 1, 0, 1)).is_err(),
            "no CR/LF into a request"
        );
    }

    #[test]
    fn an_endless_or_dribbling_answer_is_cut_at_its_cap_or_its_deadline() {
        let mut endless = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        endless.extend(vec![b'<'; HTTP_MAX * 4]);
        let e = http_exchange(fake_http(endless, false, Duration::ZERO), "GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(e.contains("more than"), "{e}");
        let t = Instant::now();
        let e = http_exchange(
            fake_http(b"HTTP/1.1 200 OK\r\n\r\nxxxxxxxxxxxx".to_vec(), true, Duration::ZERO),
            "GET / HTTP/1.1\r\n\r\n",
        )
        .unwrap_err();
        assert!(e.contains("did not answer within"), "{e}");
        assert!(t.elapsed() < HTTP_WITHIN + Duration::from_secs(1), "{:?}", t.elapsed());
    }

    #[test]
    fn random_bytes_never_panic_the_parsers() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds: [&[u8]; 3] = [
            DESCRIPTION.as_bytes(),
            b"HTTP/1.1 200 OK\r\nLocation: http://10.1.0.1:5000/x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        ];
        for _ in 0..3000 {
            let seed = seeds[(next() % 3) as usize];
            let mut m = seed.to_vec();
            for _ in 0..(next() % 6) {
                let at = (next() as usize) % m.len();
                m[at] = next() as u8;
            }
            let _ = ssdp_location(&m);
            let _ = parse_http(&m);
            if let Ok(text) = std::str::from_utf8(&m) {
                let _ = control_url(text);
                let _ = http_url(text, Ipv4Addr::new(10, 1, 0, 1));
            }
        }
    }
}
