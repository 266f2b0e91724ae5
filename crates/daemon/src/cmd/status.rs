//! `shipworm status`: what a running daemon says on its status socket, as text or JSON.

use crate::cli;
use crate::runtime::{counters, status_socket, Failure};

/// The exit status of a daemon that answers but is not doing its job (a client without
/// an address), for monitoring checks: as `systemctl is-active`'s "not running".
pub const NOT_SERVING: u8 = 3;

/// Ask the daemon and print its answer; exit [`NOT_SERVING`] when it does not serve.
pub fn run(args: &cli::StatusArgs) -> Result<(), Failure> {
    let v = status_socket::fetch(args.socket.as_deref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
    } else {
        match v.get("role").and_then(|r| r.as_str()) {
            Some("relay") => relay(&v),
            Some("server") => server(&v),
            _ => client(&v),
        }
    }
    match not_serving(&v) {
        None => Ok(()),
        Some(why) => Err(Failure { message: why, status: NOT_SERVING }),
    }
}

/// Why the daemon that sent `v` is not doing its job, if it is not: a client serves
/// once qualified, a relay or server while it says `serving`.
fn not_serving(v: &serde_json::Value) -> Option<String> {
    let state = v["state"].as_str().unwrap_or("unknown");
    let (role, serving) = match v["role"].as_str() {
        Some("client") => ("client", state == "qualified"),
        Some(role @ ("relay" | "server")) => (role, state == "serving"),
        other => return Some(format!("the daemon's role is {other:?}: not one shipworm has")),
    };
    (!serving).then(|| format!("the {role} does not serve: it is {state}"))
}

/// A field as text: strings as they are, other values in JSON, "-" when absent.
fn field(v: &serde_json::Value, k: &str) -> String {
    v.get(k)
        .and_then(|x| x.as_str().map(str::to_string).or_else(|| (!x.is_null()).then(|| x.to_string())))
        .unwrap_or_else(|| "-".into())
}

/// The counters, one a line, under the names `/metrics` and the log use.
fn counters(v: &serde_json::Value) {
    println!("counters");
    for line in counters::text_lines(&v["counters"]) {
        println!("{line}");
    }
}

fn relay(v: &serde_json::Value) {
    println!(
        "role       relay on {}, {} worker(s), up {} s",
        field(v, "interface"),
        field(v, "workers"),
        field(v, "uptime_s")
    );
    println!("peers      {} ({} waiting for a bubble's answer)", field(v, "peers"), field(v, "waiting_peers"));
    println!("data path  {}", data_path(&v["data_path"], true));
    counters(v);
}

/// The `data_path` object in words: where trusted peers' packets are moved, and (a
/// relay's) what forwards them and which route verdicts the programs keep.
fn data_path(d: &serde_json::Value, relay: bool) -> String {
    let s = |k: &str| d[k].as_str().unwrap_or("-");
    if s("kind") != "kernel" {
        return "user: every packet through the daemon".into();
    }
    if d["on"] == false {
        return "kernel, turned off after a failure (see the log): every packet through the daemon".into();
    }
    let names: Vec<&str> =
        d["interfaces"].as_array().map_or_else(Vec::new, |i| i.iter().filter_map(|x| x.as_str()).collect());
    let interfaces = if names.is_empty() { "-".to_string() } else { names.join(", ") };
    // `decap` says XDP when every interface has it, tc when one at least has not. A
    // client's and a direct relay's decapsulation is tc on every interface (their
    // redirects need an skb): only a relay through the stack can mix the two.
    let everywhere_tc = !relay || s("forward") == "direct";
    let mut text = match (s("decap"), names.len()) {
        ("xdp", _) => format!("kernel: decapsulation by XDP in the driver on {interfaces}"),
        (_, 0 | 1) => format!("kernel: decapsulation by tc ingress on {interfaces}"),
        _ if everywhere_tc => format!("kernel: decapsulation by tc ingress on {interfaces}"),
        _ => format!("kernel: decapsulation on {interfaces}, by tc ingress on one at least"),
    };
    if relay {
        let mappings =
            if d["mapping_route_verdicts"] == true { ", and clients' mappings" } else { ", not clients' mappings" };
        match (s("forward"), d["route_verdicts"].as_str()) {
            ("direct", Some(kept)) => text += &format!("; forwarding directly, route verdicts kept: {kept}{mappings}"),
            ("direct", None) => text += "; forwarding directly",
            _ if d["mapping_route_verdicts"] == true => {
                text += "; forwarding through the host's stack, route verdicts kept: clients' mappings";
            }
            _ if d["mapping_route_verdicts"] == false => {
                text += "; forwarding through the host's stack, no route verdicts kept";
            }
            _ => text += "; forwarding through the host's stack",
        }
    }
    text
}

fn server(v: &serde_json::Value) {
    println!(
        "role       server on {} and {}, up {} s",
        field(v, "primary"),
        field(v, "secondary"),
        field(v, "uptime_s")
    );
    println!("prefix     {} advertised, MTU {}", field(v, "prefix"), field(v, "mtu"));
    counters(v);
}

fn client(v: &serde_json::Value) {
    let get = |k: &str| field(v, k);
    println!("role       {} on {}", get("role"), get("interface"));
    println!("state      {}", get("state"));
    if let Some(names) = v.get("server_names").and_then(|n| n.as_array()) {
        for n in names.iter().filter(|n| n["error"].is_string()) {
            println!("  waiting  {} ({})", n["name"].as_str().unwrap_or("-"), n["error"].as_str().unwrap_or("-"));
        }
    }
    println!("address    {}", get("address"));
    if let Some(d) = v.get("decoded").filter(|d| !d.is_null()) {
        println!("  server   {}", d["server"].as_str().unwrap_or("-"));
        println!("  mapped   {}", d["mapped"].as_str().unwrap_or("-"));
    }
    println!("NAT        {}", get("nat"));
    println!("server     {}", get("server"));
    println!("MTU        {}", get("mtu"));
    println!("peers      {}", get("peers"));
    if !v["data_path"].is_null() {
        println!("data path  {}", data_path(&v["data_path"], false));
    }
    counters(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_without_an_address_is_not_serving_and_a_relay_or_server_serving_is() {
        let v = |j: serde_json::Value| not_serving(&j);
        assert_eq!(v(serde_json::json!({"role": "client", "state": "qualified"})), None);
        for state in ["resolving", "offline", "qualifying", "probing"] {
            let why = v(serde_json::json!({"role": "client", "state": state})).expect("not serving");
            assert_eq!(why, format!("the client does not serve: it is {state}"));
        }
        assert_eq!(v(serde_json::json!({"role": "relay", "state": "serving"})), None);
        assert_eq!(v(serde_json::json!({"role": "server", "state": "serving"})), None);
        assert!(v(serde_json::json!({"role": "server", "state": "draining"})).is_some());
        assert!(v(serde_json::json!({"role": "printer"})).is_some());
    }

    #[test]
    fn the_data_path_is_told_in_words() {
        let user = serde_json::json!({ "kind": "user" });
        assert_eq!(data_path(&user, true), "user: every packet through the daemon");
        let direct = serde_json::json!({
            "kind": "kernel", "decap": "tc", "forward": "direct", "interfaces": ["eth0", "eth1"],
            "programs": [1, 2, 3], "route_verdicts": "clients and destinations", "mapping_route_verdicts": true,
        });
        assert_eq!(
            data_path(&direct, true),
            "kernel: decapsulation by tc ingress on eth0, eth1; forwarding directly, route verdicts kept: clients and destinations, and clients' mappings"
        );
        let mixed =
            serde_json::json!({ "kind": "kernel", "decap": "tc", "forward": "stack", "interfaces": ["eth0", "eth1"] });
        assert_eq!(
            data_path(&mixed, true),
            "kernel: decapsulation on eth0, eth1, by tc ingress on one at least; forwarding through the host's stack"
        );
        let kept = serde_json::json!({
            "kind": "kernel", "decap": "xdp", "forward": "stack", "interfaces": ["eth0"], "mapping_route_verdicts": true,
        });
        assert_eq!(
            data_path(&kept, true),
            "kernel: decapsulation by XDP in the driver on eth0; forwarding through the host's stack, route verdicts kept: clients' mappings"
        );
        let none = serde_json::json!({
            "kind": "kernel", "decap": "xdp", "forward": "stack", "interfaces": ["eth0"], "mapping_route_verdicts": false,
        });
        assert_eq!(
            data_path(&none, true),
            "kernel: decapsulation by XDP in the driver on eth0; forwarding through the host's stack, no route verdicts kept"
        );
        let stack = serde_json::json!({ "kind": "kernel", "decap": "xdp", "forward": "stack", "interfaces": ["eth0"] });
        assert_eq!(
            data_path(&stack, true),
            "kernel: decapsulation by XDP in the driver on eth0; forwarding through the host's stack"
        );
        let client =
            serde_json::json!({ "kind": "kernel", "decap": "tc", "forward": "stack", "interfaces": ["wlan0"] });
        assert_eq!(data_path(&client, false), "kernel: decapsulation by tc ingress on wlan0");
        let off = serde_json::json!({ "kind": "kernel", "decap": "tc", "interfaces": ["eth0"], "on": false });
        assert_eq!(
            data_path(&off, false),
            "kernel, turned off after a failure (see the log): every packet through the daemon"
        );
        let phone = serde_json::json!({ "kind": "kernel", "decap": "tc", "interfaces": ["eth0", "wlan0"] });
        assert_eq!(data_path(&phone, false), "kernel: decapsulation by tc ingress on eth0, wlan0");
    }
}
