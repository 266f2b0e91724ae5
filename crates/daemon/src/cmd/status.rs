//! `shipworm status`: what a running daemon says on its status socket, as text or JSON.

use crate::cli;
use crate::runtime::{counters, status_socket, Failure};

/// Ask the daemon and print its answer.
pub fn run(args: &cli::StatusArgs) -> Result<(), Failure> {
    let v = status_socket::fetch(args.socket.as_deref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
        return Ok(());
    }
    match v.get("role").and_then(|r| r.as_str()) {
        Some("relay") => relay(&v),
        Some("server") => server(&v),
        _ => client(&v),
    }
    Ok(())
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
    counters(v);
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
    counters(v);
}
