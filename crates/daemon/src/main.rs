//! `shipworm`: the Teredo client, server, relay and host-specific relay, and the tools
//! around them. This crate is the top floor: command line, sockets, TUN, netlink,
//! configuration, privileges. The protocol itself lives in `shipworm-proto`, the
//! packet formats in `shipworm-wire`.

use shipworm::{socket_buffers, udp_batch};

mod address_cmd;
mod cli;
mod client_cmd;
mod config;
mod lab_cmd;
mod logging;
mod miredo_config;
mod netlink;
mod privileges;
mod relay_cmd;
mod server_cmd;
mod server_config;
mod server_names;
mod signals;
mod status;
mod tun;

use clap::Parser;
use std::process::ExitCode;

/// A failure to report: one line on stderr and an exit status.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong and, where we know it, how to fix it.
    pub message: String,
    /// 2 for bad input (usage, malformed arguments or configuration), 1 otherwise.
    pub status: u8,
}

impl Failure {
    /// Bad input from the user: exit status 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure { message: message.into(), status: 2 }
    }

    /// A failure at run time (a socket, a permission…): exit status 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        Failure { message: message.into(), status: 1 }
    }
}

/// Clap's error as one line: its first line plus the indented lines that continue it
/// (the names of missing arguments), without the usage block.
fn one_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("invalid arguments");
    let mut out = first.strip_prefix("error: ").unwrap_or(first).trim_end_matches(':').to_string();
    let more: Vec<&str> = lines.take_while(|l| l.starts_with(' ')).map(str::trim).collect();
    if !more.is_empty() {
        out.push_str(": ");
        out.push_str(&more.join(", "));
    }
    out
}

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version go to stdout with status 0.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, not clap's multi-line usage block: scripts read stderr too.
            eprintln!("shipworm: {} (see 'shipworm --help')", one_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        cli::Command::Address(args) => address_cmd::run(&args),
        cli::Command::Server(args) => run_server(&args),
        cli::Command::Relay(args) => run_relay(&args),
        cli::Command::Client(args) => run_client(&args),
        cli::Command::Status(args) => show_status(&args),
        cli::Command::CheckConfig(args) => check_config(&args),
        cli::Command::Lab(args) => lab_cmd::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("shipworm: {}", f.message);
            ExitCode::from(f.status)
        }
    }
}

fn run_server(args: &cli::ServerArgs) -> Result<(), Failure> {
    logging::init("info");
    let over =
        server_config::ServerOverrides { bind: args.bind.clone(), bind2: args.bind2.clone(), user: args.user.clone() };
    let settings = server_config::load(Some(&args.config), &over).map_err(|e| Failure::usage(e.to_string()))?;
    server_cmd::run(&settings)
}

fn write_pidfile(path: Option<&std::path::Path>) -> Result<(), Failure> {
    if let Some(p) = path {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| Failure::runtime(format!("cannot write the pid file {}: {e}", p.display())))?;
    }
    Ok(())
}

fn run_relay(args: &cli::RelayArgs) -> Result<(), Failure> {
    logging::init("info");
    let mut conf = miredo_config::load(&args.config, None).map_err(|e| Failure::usage(e.to_string()))?;
    if conf.role == miredo_config::RelayType::Client {
        return Err(Failure::usage(format!(
            "{}: RelayType is client: this file configures a Teredo client, not a relay",
            args.config.display()
        )));
    }
    if args.user.is_some() {
        conf.user = args.user.clone();
    }
    write_pidfile(args.pidfile.as_deref())?;
    let r = relay_cmd::run(&conf);
    if let Some(p) = &args.pidfile {
        let _ = std::fs::remove_file(p);
    }
    r
}

fn run_client(args: &cli::ClientArgs) -> Result<(), Failure> {
    logging::init("info");
    let mut conf =
        miredo_config::load(&args.config, args.server.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    if conf.role != miredo_config::RelayType::Client {
        return Err(Failure::usage(format!(
            "{}: RelayType is {:?}: this file configures a relay; run shipworm relay",
            args.config.display(),
            conf.role
        )));
    }
    if args.user.is_some() {
        conf.user = args.user.clone();
    }
    write_pidfile(args.pidfile.as_deref())?;
    let r = client_cmd::run(&conf, args.control.as_deref());
    if let Some(p) = &args.pidfile {
        let _ = std::fs::remove_file(p);
    }
    r
}

fn show_status(args: &cli::StatusArgs) -> Result<(), Failure> {
    let v = status::fetch(args.socket.as_deref())?;
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

fn check_config(args: &cli::CheckConfigArgs) -> Result<(), Failure> {
    match args.role {
        cli::Role::Server => {
            let s = server_config::load(Some(&args.file), &Default::default())
                .map_err(|e| Failure::usage(e.to_string()))?;
            let p = &s.proto;
            println!("{}: valid server configuration", args.file.display());
            println!("  primary    {}:3544", p.primary);
            println!("  secondary  {}:3544", p.secondary);
            println!(
                "  prefix     {}/64 advertised",
                shipworm_wire::teredo_addr::TeredoAddr::client_prefix(p.prefix, p.primary)
            );
            println!("  MTU        {}", p.mtu);
            println!("  ICMPv6 forwarded up to {} bytes", p.max_forwarded_icmpv6);
            if p.clients.is_empty() {
                println!("  secure qualification off");
            } else {
                println!("  secure qualification required ({} clients)", p.clients.len());
            }
            println!("  runs as    {}", s.user.as_deref().unwrap_or(privileges::DEFAULT_USER));
        }
        cli::Role::Miredo => {
            let c = miredo_config::load(&args.file, None).map_err(|e| Failure::usage(e.to_string()))?;
            for w in &c.warnings {
                println!("warning: {w}");
            }
            println!("{}: valid {:?} configuration", args.file.display(), c.role);
            println!("  interface  {} (MTU {})", c.interface, c.mtu);
            println!("  UDP        {}:{}", c.bind_address, c.bind_port);
            // Names are checked for syntax only: the client resolves them when it runs.
            let name_note = |h: &config::Host| match h {
                config::Host::Addr(_) => "",
                config::Host::Name(_) => " (a name, resolved by the running client)",
            };
            if let Some(s) = &c.server {
                println!("  server     {s}{}", name_note(s));
            }
            if let Some(s) = &c.server2 {
                println!("  secondary  {s}{}", name_note(s));
            }
            for s in &c.fallback_servers {
                println!("  fallback   {s}{}", name_note(s));
            }
            println!("  runs as    {}", c.user.as_deref().unwrap_or(privileges::DEFAULT_USER));
        }
    }
    Ok(())
}
