//! Miredo's configuration format, read unchanged: one `Directive value` per line,
//! directive names case-insensitive, `#` starts a comment, blank lines ignored. Each
//! role takes the directives it knows and refuses the rest; every error names the
//! file, the line and the reason, on one line.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// One `Directive value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// Name as written (matched case-insensitively).
    pub name: String,
    /// Value, trimmed; may contain spaces (hook script paths).
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// A configuration error: `FILE:LINE: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The line, when the error is about one.
    pub line: Option<usize>,
    /// Why.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.path.display(), l, self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// A parsed file whose directives the role consumes one by one; whatever is left at
/// the end is unknown to the role.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: PathBuf,
    directives: Vec<Directive>,
}

impl ConfigFile {
    /// Read and split a file.
    pub fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let bytes = std::fs::read(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: None,
            reason: format!("cannot read: {e}"),
        })?;
        ConfigFile::from_bytes(path, &bytes)
    }

    /// Split a file's bytes; bytes that are not UTF-8 are refused with their line.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<ConfigFile, ConfigError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => ConfigFile::parse(path, text),
            Err(e) => {
                let at = e.valid_up_to();
                let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
                Err(ConfigError {
                    path: path.to_path_buf(),
                    line: Some(line),
                    reason: format!("byte {:#04x} is not UTF-8 text (save the file as UTF-8)", bytes[at]),
                })
            }
        }
    }

    /// Split `text` into directives.
    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigError> {
        let mut directives = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (name, value) = match line.split_once(char::is_whitespace) {
                Some((n, v)) => (n, v.trim()),
                None => (line, ""),
            };
            if value.is_empty() {
                return Err(ConfigError {
                    path: path.to_path_buf(),
                    line: Some(i + 1),
                    reason: format!("directive {name} has no value"),
                });
            }
            directives.push(Directive { name: name.to_string(), value: value.to_string(), line: i + 1 });
        }
        Ok(ConfigFile { path: path.to_path_buf(), directives })
    }

    /// The directives not taken yet, in file order.
    pub fn directives(&self) -> &[Directive] {
        &self.directives
    }

    /// An error about `d`.
    pub fn error(&self, d: &Directive, reason: impl Into<String>) -> ConfigError {
        ConfigError { path: self.path.clone(), line: Some(d.line), reason: reason.into() }
    }

    /// A warning about `d`, located as its errors are (`FILE:LINE: reason`).
    pub fn warning(&self, d: &Directive, reason: impl Into<String>) -> String {
        self.error(d, reason).to_string()
    }

    /// An error about the file as a whole.
    pub fn file_error(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError { path: self.path.clone(), line: None, reason: reason.into() }
    }

    /// Take the directive `name` (at most once in the file).
    pub fn take(&mut self, name: &str) -> Result<Option<Directive>, ConfigError> {
        let mut found = self.take_all(name);
        if found.len() > 1 {
            let second = found.swap_remove(1);
            return Err(self.error(&second, format!("{} given twice (first on line {})", second.name, found[0].line)));
        }
        Ok(found.pop())
    }

    /// Take every occurrence of `name`.
    pub fn take_all(&mut self, name: &str) -> Vec<Directive> {
        let (found, rest) = self.directives.drain(..).partition(|d| d.name.eq_ignore_ascii_case(name));
        self.directives = rest;
        found
    }

    /// Refuse the first directive that is not among `known`, before any other line is
    /// judged: a misspelt name is the error to report, not the setting it failed to set
    /// ("ServerAddress is required"). Names the nearest known directive when one is
    /// near.
    pub fn refuse_unknown(&self, known: &[&str]) -> Result<(), ConfigError> {
        let Some(d) = self.directives.iter().find(|d| !known.iter().any(|k| k.eq_ignore_ascii_case(&d.name))) else {
            return Ok(());
        };
        let lower = d.name.to_ascii_lowercase();
        let nearest = known
            .iter()
            .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), *k))
            .min()
            .filter(|&(distance, _)| distance <= 2);
        Err(match nearest {
            Some((_, k)) => self.error(d, format!("unknown directive {} (did you mean {k}?)", d.name)),
            None => self.error(d, format!("unknown directive {} (known here: {})", d.name, known.join(", "))),
        })
    }

    /// Refuse whatever the role did not take.
    pub fn finish(self, known: &[&str]) -> Result<(), ConfigError> {
        match self.directives.first() {
            None => Ok(()),
            Some(d) => Err(self.error(d, format!("unknown directive {} (known here: {})", d.name, known.join(", ")))),
        }
    }

    /// Parse the value of `d` with `f`, turning its error into a located one.
    pub fn value<T>(&self, d: &Directive, f: impl FnOnce(&str) -> Result<T, String>) -> Result<T, ConfigError> {
        f(&d.value).map_err(|why| self.error(d, format!("{} {}: {why}", d.name, d.value)))
    }

    /// As [`value`](Self::value), for a value that holds a secret after its first word:
    /// an error names the directive and that word only (errors go to logs and
    /// terminals).
    pub fn secret_value<T>(&self, d: &Directive, f: impl FnOnce(&str) -> Result<T, String>) -> Result<T, ConfigError> {
        f(&d.value).map_err(|why| {
            let shown = d.value.split_whitespace().next().unwrap_or("");
            self.error(d, format!("{} {shown} (secret not shown): {why}", d.name))
        })
    }
}

/// Levenshtein's distance between two names (insertions, deletions, substitutions).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// An IPv4 address, or a host name resolved once to its first IPv4 address.
pub fn ipv4(value: &str) -> Result<Ipv4Addr, String> {
    if let Ok(a) = value.parse() {
        return Ok(a);
    }
    if value.parse::<IpAddr>().is_ok() {
        return Err("not an IPv4 address".into());
    }
    (value, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .find_map(|a| match a.ip() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
        .ok_or_else(|| "has no IPv4 address".into())
}

/// A Teredo server's IPv4 address, which must be global unicast: clients reach it from
/// anywhere on the IPv4 Internet. Checks a client's servers and a server's own addresses.
pub fn global_unicast(a: Ipv4Addr) -> Result<Ipv4Addr, String> {
    match shipworm_wire::ipv4_scope::non_global_reason(a) {
        None => Ok(a),
        Some(why) => Err(format!("a Teredo server needs a global unicast address, this is {why}")),
    }
}

/// Where a client finds a Teredo server: an IPv4 literal, or a host name resolved by
/// the daemon (in the background, and again when the network changes). Checking a file
/// never resolves: a name that does not resolve yet is not a configuration error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An IPv4 address, used as is.
    Addr(Ipv4Addr),
    /// A host name (RFC 1123 syntax, checked), as written.
    Name(String),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Addr(a) => a.fmt(f),
            Host::Name(n) => f.write_str(n),
        }
    }
}

/// A Teredo server: an IPv4 literal passing `check` (global unicast), or a host name.
pub fn server_host(value: &str, check: impl Fn(Ipv4Addr) -> Result<Ipv4Addr, String>) -> Result<Host, String> {
    match value.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => check(a).map(Host::Addr),
        // Teredo runs over IPv4: a server is reached there or not at all.
        Ok(IpAddr::V6(_)) => Err("not an IPv4 address".into()),
        Err(_) => host_name(value).map(|()| Host::Name(value.to_string())),
    }
}

/// Whether `name` can ever be a host name (RFC 1123 §2.1): labels of 1 to 63 letters,
/// digits and hyphens, neither first nor last a hyphen, 253 characters in all, and a
/// last label that is not all digits (so `1.2.3` or `300.1.1.1` is a mistyped address,
/// not a name). One trailing dot (a fully qualified name) is allowed.
pub fn host_name(name: &str) -> Result<(), String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.is_empty() {
        return Err("not an IPv4 address or a host name".into());
    }
    if bare.len() > 253 {
        return Err(format!("a host name has at most 253 characters, this one {}", bare.len()));
    }
    for label in bare.split('.') {
        if label.is_empty() {
            return Err("empty label in host name (two dots in a row, or a leading dot)".into());
        }
        if label.len() > 63 {
            return Err(format!("label {label:.20}… is {} characters long; at most 63", label.len()));
        }
        if let Some(c) = label.chars().find(|c| !c.is_ascii_alphanumeric() && *c != '-') {
            return Err(format!("{c:?} in label {label:?}: a host name has only letters, digits, hyphens and dots"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with a hyphen"));
        }
    }
    if bare.rsplit('.').next().is_some_and(|top| top.bytes().all(|b| b.is_ascii_digit())) {
        return Err("not an IPv4 address, and not a host name (its last label is all digits)".into());
    }
    Ok(())
}

/// A Teredo prefix as Miredo writes it (`2001:0::`, optionally with `/32`).
pub fn teredo_prefix(value: &str) -> Result<u32, String> {
    let (addr, len) = match value.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (value, None),
    };
    if len.is_some_and(|l| l != "32") {
        return Err("a Teredo prefix is a /32".into());
    }
    let a: std::net::Ipv6Addr = addr.parse().map_err(|_| "not an IPv6 prefix (e.g. 2001:0::)".to_string())?;
    let o = a.octets();
    if o[4..].iter().any(|&b| b != 0) {
        return Err("bits beyond the first 32 are set".into());
    }
    if o[0] & 0xe0 != 0x20 {
        return Err("not a global unicast prefix (2000::/3)".into());
    }
    Ok(u32::from_be_bytes([o[0], o[1], o[2], o[3]]))
}

/// An interface MTU: IPv6 needs at least 1280.
pub fn mtu(value: &str) -> Result<u16, String> {
    match value.parse::<u32>() {
        Ok(m) if (1280..=65535).contains(&m) => Ok(m as u16),
        _ => Err("expected an MTU from 1280 to 65535".into()),
    }
}

/// A syslog facility name, as Miredo accepts (daemon, local0 … local7, …).
pub fn syslog_facility(value: &str) -> Result<String, String> {
    const NAMES: &[&str] = &[
        "auth", "authpriv", "cron", "daemon", "ftp", "kern", "lpr", "mail", "news", "syslog", "user", "uucp", "local0",
        "local1", "local2", "local3", "local4", "local5", "local6", "local7",
    ];
    let v = value.to_ascii_lowercase();
    if NAMES.contains(&v.as_str()) {
        Ok(v)
    } else {
        Err(format!("unknown syslog facility (one of {})", NAMES.join(", ")))
    }
}

/// `yes` or `no` (also `on`/`off`, `true`/`false`, `1`/`0`, any case).
pub fn yes_no(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" | "on" | "true" | "1" => Ok(true),
        "no" | "off" | "false" | "0" => Ok(false),
        _ => Err("expected yes or no".into()),
    }
}

/// One of two words, any case: `off` (false) or `on` (true).
pub fn either(value: &str, off: &str, on: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase() {
        v if v == off => Ok(false),
        v if v == on => Ok(true),
        _ => Err(format!("expected {off} or {on}")),
    }
}

/// `SystemCallFilter`: `yes`, `log` or `no`.
pub fn filter_mode(value: &str) -> Result<crate::runtime::confinement::FilterMode, String> {
    crate::runtime::confinement::FilterMode::parse(value).ok_or_else(|| "expected yes, log or no".into())
}

/// `IP:PORT` to listen on (`MetricsAddress`; IPv6 in brackets).
pub fn listen_address(value: &str) -> Result<std::net::SocketAddr, String> {
    value.parse().map_err(|_| "expected IP:PORT, e.g. 127.0.0.1:9544 or [::1]:9544".into())
}

/// A count or size.
pub fn number(value: &str) -> Result<usize, String> {
    value.parse().map_err(|_| "expected a whole number".into())
}

/// A count or size within `range`; `unit` names what is counted in the error
/// (`expected 1 to 256 worker threads`).
pub fn number_in(value: &str, range: std::ops::RangeInclusive<usize>, unit: &str) -> Result<usize, String> {
    match number(value)? {
        n if range.contains(&n) => Ok(n),
        _ => Err(format!("expected {} to {} {unit}", range.start(), range.end())),
    }
}

/// `CLIENT-ID SECRET` for secure qualification (both at most 255 bytes).
pub fn credentials(value: &str) -> Result<shipworm_proto::secure::Credentials, String> {
    let mut parts = value.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(secret), None) if id.len() <= 255 && secret.len() >= 8 => {
            Ok(shipworm_proto::secure::Credentials {
                client_id: id.as_bytes().to_vec(),
                secret: secret.as_bytes().to_vec(),
            })
        }
        (Some(_), Some(_), None) => Err("the client id is at most 255 bytes and the secret at least 8".into()),
        _ => Err("expected CLIENT-ID SECRET".into()),
    }
}

/// BIRD's control socket, by absolute path.
pub fn bird_socket(value: &str) -> Result<PathBuf, String> {
    if value.starts_with('/') {
        Ok(PathBuf::from(value))
    } else {
        Err("expected the absolute path of BIRD's control socket (e.g. /run/bird/bird.ctl)".into())
    }
}

/// The names of one to four BIRD protocols, as BIRD's configuration writes them.
pub fn bird_protocols(value: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = value.split_whitespace().map(str::to_string).collect();
    if names.is_empty() || names.len() > 4 || !names.iter().all(|n| crate::io::bird::is_protocol_name(n)) {
        return Err("expected one to four BIRD protocol names (letters, digits, '_', not starting with a digit)".into());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::parse(Path::new("test.conf"), text).unwrap()
    }

    #[test]
    fn miredo_syntax() {
        let mut f = file("# comment\n\n  ServerBindAddress\t192.0.2.1  # trailing\nprefix 2001:0::\n");
        let d = f.take("serverbindaddress").unwrap().unwrap();
        assert_eq!((d.value.as_str(), d.line), ("192.0.2.1", 3));
        assert_eq!(f.take("PREFIX").unwrap().unwrap().value, "2001:0::");
        assert!(f.finish(&[]).is_ok());
    }

    #[test]
    fn errors_name_file_line_and_reason() {
        let e = ConfigFile::parse(Path::new("/etc/x.conf"), "Prefix\n").unwrap_err();
        assert_eq!(e.to_string(), "/etc/x.conf:1: directive Prefix has no value");
        let mut f = file("Prefix 2001:0::\nprefix 3ffe:831f::\n");
        assert_eq!(f.take("Prefix").unwrap_err().to_string(), "test.conf:2: prefix given twice (first on line 1)");
        let f = file("\nBogus 1\n");
        let e = f.finish(&["Prefix"]).unwrap_err();
        assert_eq!(e.to_string(), "test.conf:2: unknown directive Bogus (known here: Prefix)");
    }

    #[test]
    fn values() {
        assert_eq!(teredo_prefix("2001:0::").unwrap(), 0x2001_0000);
        assert_eq!(teredo_prefix("3ffe:831f::/32").unwrap(), 0x3ffe_831f);
        assert!(teredo_prefix("fe80::").is_err());
        assert!(teredo_prefix("2001:0:1::").is_err());
        assert_eq!(mtu("1280").unwrap(), 1280);
        assert!(mtu("1279").is_err());
        assert!(ipv4("2001:db8::1").is_err());
        assert_eq!(ipv4("192.0.2.1").unwrap(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(syslog_facility("LOCAL3").unwrap(), "local3");
    }

    #[test]
    fn server_hosts() {
        let any = |a: Ipv4Addr| Ok(a);
        assert_eq!(server_host("192.0.2.1", any).unwrap(), Host::Addr(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(server_host("teredo.example.net", any).unwrap(), Host::Name("teredo.example.net".into()));
        assert_eq!(server_host("Teredo-1.example.NET.", any).unwrap(), Host::Name("Teredo-1.example.NET.".into()));
        assert_eq!(server_host("localhost", any).unwrap(), Host::Name("localhost".into()));
        assert_eq!(server_host("123.example", any).unwrap(), Host::Name("123.example".into()));
        assert!(server_host("2001:db8::1", any).unwrap_err().contains("not an IPv4 address"));
        let refuse = |_| Err("private".to_string());
        assert_eq!(server_host("10.0.0.1", refuse).unwrap_err(), "private");
        // The checker applies to literals only: a name is judged once it resolves.
        assert!(server_host("teredo.example.net", refuse).is_ok());
    }

    #[test]
    fn host_names_that_can_never_resolve() {
        for (name, why) in [
            ("1.2.3", "all digits"),
            ("300.1.1.1", "all digits"),
            ("example.123", "all digits"),
            ("bad_name.example", "'_' in label"),
            ("-lead.example", "hyphen"),
            ("trail-.example", "hyphen"),
            ("a..b", "empty label"),
            (".example", "empty label"),
            ("a.b..", "empty label"),
            (".", "not an IPv4 address or a host name"),
            ("teredo example", "' ' in label"),
        ] {
            let e = host_name(name).unwrap_err();
            assert!(e.contains(why), "{name}: {e}");
        }
        let long_label = "a".repeat(64);
        assert!(host_name(&format!("{long_label}.example")).unwrap_err().contains("at most 63"));
        assert!(host_name(&format!("{}.example", "a".repeat(63))).is_ok());
        let long_name = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)].join(".");
        assert_eq!(long_name.len(), 253);
        assert!(host_name(&long_name).is_ok());
        assert!(host_name(&format!("{long_name}.")).is_ok(), "the root dot does not count");
        assert!(host_name(&format!("x{long_name}")).unwrap_err().contains("at most 253"));
        assert!(syslog_facility("local9").is_err());
    }
}
