//! `shipworm status`: what a running daemon says on its status socket, as text or JSON.

use crate::cli;
use crate::runtime::{status_socket, Failure};

/// Ask the daemon and print its answer.
pub fn run(args: &cli::StatusArgs) -> Result<(), Failure> {
    let v = status_socket::fetch(args.socket.as_deref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v).expect("serializes"));
        return Ok(());
    }
    let get = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str().map(str::to_string).or_else(|| (!x.is_null()).then(|| x.to_string())))
            .unwrap_or_else(|| "-".into())
    };
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
    println!(
        "held       {} native host(s) that spoke first, under their connectivity test",
        get("first_contacts_waiting")
    );
    println!("counters   {}", v.get("counters").map(|c| c.to_string()).unwrap_or_default());
    Ok(())
}
